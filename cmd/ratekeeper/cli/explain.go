package cli

import (
	"encoding/json"
	"fmt"
	"time"

	"github.com/ratekeeper/ratekeeper/headers"
	"github.com/spf13/cobra"
)

func init() { register(newExplainCmd) }

func newExplainCmd() *cobra.Command {
	var nowFlag string
	var asJSON bool
	cmd := &cobra.Command{
		Use:   "explain [--now RFC3339] [--json] < response.http",
		Short: "Explain what a raw HTTP response says about rate limits",
		Long: `Reads a raw HTTP response on stdin, as printed by 'curl -i', 'curl -sD -' or
'curl -v' (status line, header lines, blank line, optional body), and explains
what it says about rate limits: limit, remaining, reset, retry-after, whether
the request was refused for rate limiting, and how long to wait.

"Now" is --now if given, else the response's Date, else this machine's clock.
Exit status 0 whenever a response was read, with or without rate-limit
headers; 2 when stdin is not an HTTP response.`,
		Example: `  curl -si https://api.github.com/rate_limit | ratekeeper explain
  ratekeeper explain --json < testdata/responses/github-primary-exceeded.http`,
		Args: cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			raw, err := headers.ReadRaw(cmd.InOrStdin())
			if err != nil {
				return &ExitError{Code: 2, Err: fmt.Errorf("explain: %w", err)}
			}
			now := time.Now().UTC()
			if nowFlag != "" {
				t, err := time.Parse(time.RFC3339Nano, nowFlag)
				if err != nil {
					return exitf(2, "--now %q: want an RFC 3339 time such as 2026-01-01T00:47:26Z", nowFlag)
				}
				now = t
			} else if t, ok := headers.ServerTime(raw.Header); ok {
				now = t
			}
			reading := headers.Parse(raw.Status, raw.Header, raw.Body, now)
			out := cmd.OutOrStdout()
			if asJSON {
				enc := json.NewEncoder(out)
				return enc.Encode(reading.Summarize())
			}
			_, err = fmt.Fprintln(out, reading.Describe(now))
			return err
		},
	}
	cmd.Flags().StringVar(&nowFlag, "now", "", "the time to judge the response at (RFC 3339); default: its Date header, else the local clock")
	cmd.Flags().BoolVar(&asJSON, "json", false, "print one JSON object instead of an explanation")
	return cmd
}
