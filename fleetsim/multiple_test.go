package fleetsim

import (
	"testing"
	"time"
)

// TestMultipleWindow: the windows learnt as two or more of the server's,
// to within a second, are the open finding -sim.learnt checks.
func TestMultipleWindow(t *testing.T) {
	for _, c := range []struct {
		learnt, server time.Duration
		want           bool
	}{
		{8 * time.Second, 4 * time.Second, true},
		{14 * time.Second, 7 * time.Second, true},
		{21 * time.Second, 10 * time.Second, true},
		{30 * time.Second, 10 * time.Second, true},
		{10 * time.Second, 10 * time.Second, false},
		{11 * time.Second, 10 * time.Second, false},
		{15 * time.Second, 10 * time.Second, false},
		{2 * time.Second, 10 * time.Second, false},
	} {
		if got := multipleWindow(c.learnt, c.server); got != c.want {
			t.Errorf("multipleWindow(%v, %v) = %v, want %v", c.learnt, c.server, got, c.want)
		}
	}
}
