package cli

import (
	"fmt"

	"github.com/spf13/cobra"

	"github.com/ratekeeper/ratekeeper/internal/buildinfo"
)

func init() { register(newVersionCmd) }

func newVersionCmd() *cobra.Command {
	return &cobra.Command{
		Use:   "version",
		Short: "Print ratekeeper's version, commit, build date and Go version",
		Long: `Print which ratekeeper this is: its module version, the commit it was built
from (marked modified when built with changes not committed), the commit's
date and the Go version. The same facts are on every /metrics as the
ratekeeper_build_info gauge; 'ratekeeper --version' prints the same.`,
		Args: cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			fmt.Fprint(cmd.OutOrStdout(), buildinfo.Read().String())
			return nil
		},
	}
}
