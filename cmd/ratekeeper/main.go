// Command ratekeeper does lots of work against rate-limited APIs fast,
// without being throttled and without losing work. See the README.
package main

import (
	"os"

	"github.com/ratekeeper/ratekeeper/cmd/ratekeeper/cli"
)

func main() {
	os.Exit(cli.Execute(os.Args[1:], os.Stdin, os.Stdout, os.Stderr))
}
