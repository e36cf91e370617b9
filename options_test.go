package ratekeeper

import (
	"strings"
	"testing"
	"time"
)

func TestOptionsReserveAndPauses(t *testing.T) {
	for _, c := range []struct {
		opts Options
		want string
	}{
		{Options{ReservePercent: 100}, "want a percentage from 0 up to (not including) 100"},
		{Options{Reserve: 5, ReservePercent: 10}, "want one of them"},
		{Options{Reserve: -1}, "want 0 or more requests"},
		{Options{MaxPause: -time.Second}, "want positive durations"},
	} {
		c.opts.Tokens = map[string][]string{"github": {"tok-options-0001"}}
		if _, err := NewTransport(c.opts); err == nil || !strings.Contains(err.Error(), c.want) {
			t.Errorf("%+v: %v, want an error saying %q", c.opts, err, c.want)
		}
	}
	tr, err := NewTransport(Options{ReservePercent: 10, MaxPause: 10 * time.Minute, SecondaryWait: 6 * time.Second,
		Tokens: map[string][]string{"github": {"tok-options-0001"}}})
	if err != nil {
		t.Fatal(err)
	}
	tr.Close()
}
