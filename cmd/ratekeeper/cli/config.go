package cli

import (
	"fmt"
	"os"
	"strings"

	"github.com/spf13/cobra"

	"github.com/ratekeeper/ratekeeper/provider"
)

func init() { register(newConfigCmd) }

func newConfigCmd() *cobra.Command {
	cmd := &cobra.Command{
		Use:   "config",
		Short: "Work with the --config file",
		Args:  cobra.NoArgs,
		RunE:  func(cmd *cobra.Command, _ []string) error { return cmd.Help() },
	}
	cmd.AddCommand(&cobra.Command{
		Use:   "check FILE",
		Short: "Check a --config file: every problem with its line and key, exit 2 on any",
		Long: `Check a --config file the way every command loads it (the built-in providers,
then the file), and print every problem, one a line: the file, the line, the
key, what is wrong and what would be right. Unlike loading, which stops a
command at the first problem, the check goes on past each. It also reads
each GitHub App's private key file. Nothing is sent and no token is read.

Exit status: 0 when the file is fine (a line per provider it configures is
printed), 2 when it has problems or cannot be read.`,
		Example: `  ratekeeper config check ratekeeper.toml`,
		Args:    cobra.ExactArgs(1),
		RunE:    func(cmd *cobra.Command, args []string) error { return runConfigCheck(cmd, args[0]) },
	})
	return cmd
}

func runConfigCheck(cmd *cobra.Command, file string) error {
	data, err := os.ReadFile(file)
	if err != nil {
		return exitf(2, "cannot read config file: %v", err)
	}
	out := cmd.OutOrStdout()
	cfg, reg, problems := provider.CheckConfig(data, file)
	if len(problems) > 0 {
		for _, p := range problems {
			fmt.Fprintln(out, p)
		}
		return exitf(2, "%s: %d problem%s", file, len(problems), plural(len(problems)))
	}
	names := cfg.Names()
	summary := fmt.Sprintf("%s: no problems; %d provider%s configured", file, len(names), plural(len(names)))
	if cfg.AutoHosts != nil && !*cfg.AutoHosts {
		summary += "; auto_hosts = false: hosts no provider owns are left alone"
	}
	fmt.Fprintln(out, summary)
	builtin := provider.Defaults()
	for _, name := range names {
		p := reg.Lookup(name)
		how := "new"
		if builtin.Lookup(name) != nil {
			how = "built in, refined"
		}
		var extra []string
		if n := len(p.EndpointLimits); n > 0 {
			extra = append(extra, fmt.Sprintf("%d endpoint limit%s", n, plural(n)))
		}
		if p.App != nil {
			extra = append(extra, fmt.Sprintf("GitHub App %d, %d installation%s", p.App.AppID, len(p.App.InstallationIDs), plural(len(p.App.InstallationIDs))))
		}
		line := fmt.Sprintf("  %s: %s, kind %s, %s", name, how, p.Kind, p.BaseURL())
		if len(extra) > 0 {
			line += " (" + strings.Join(extra, "; ") + ")"
		}
		fmt.Fprintln(out, line)
	}
	return nil
}
