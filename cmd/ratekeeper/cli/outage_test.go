package cli

import (
	"io"
	"testing"
	"time"

	"github.com/spf13/cobra"

	"github.com/ratekeeper/ratekeeper/store"
)

// --db-outage-timeout reaches the client's options: the default is the
// library's, a duration is passed on, and 0 (give up at once) is the
// library's negative.
func TestDBOutageTimeoutFlag(t *testing.T) {
	for _, c := range []struct {
		args []string
		want time.Duration
	}{
		{nil, store.DefaultOutageTimeout},
		{[]string{"--db-outage-timeout", "30s"}, 30 * time.Second},
		{[]string{"--db-outage-timeout", "0"}, -1},
	} {
		var f clientFlags
		cmd := &cobra.Command{Use: "x", RunE: func(*cobra.Command, []string) error { return nil }}
		f.add(cmd)
		if err := cmd.ParseFlags(c.args); err != nil {
			t.Fatal(err)
		}
		opts, err := f.options(io.Discard)
		if err != nil {
			t.Fatal(err)
		}
		if opts.DBOutageTimeout != c.want {
			t.Errorf("%v: DBOutageTimeout %v; want %v", c.args, opts.DBOutageTimeout, c.want)
		}
	}
}

// The tasks commands take it beside their --db, and a worker's client
// gets it too.
func TestTasksDBOutageTimeoutFlag(t *testing.T) {
	root := NewRoot()
	tasksCmd, _, err := root.Find([]string{"tasks", "worker"})
	if err != nil {
		t.Fatal(err)
	}
	if f := tasksCmd.Flag("db-outage-timeout"); f == nil || f.DefValue != store.DefaultOutageTimeout.String() {
		t.Fatalf("tasks worker --db-outage-timeout = %v; want a flag defaulting to %v", f, store.DefaultOutageTimeout)
	}
	for _, name := range []string{"serve", "fetch", "poll", "get", "status"} {
		c, _, err := root.Find([]string{name})
		if err != nil {
			t.Fatal(err)
		}
		if c.Flag("db-outage-timeout") == nil {
			t.Errorf("%s has no --db-outage-timeout", name)
		}
	}
}
