package headers

import (
	"net/http"
	"testing"
	"time"
)

// ServerReset is the reset on the server's clock whatever the now a
// reading is parsed at: an instant as stated, a delay from the Date.
func TestServerResetDoesNotMoveWithNow(t *testing.T) {
	date := time.Date(2026, 1, 1, 0, 0, 30, 0, time.UTC)
	cases := []struct {
		name string
		h    http.Header
		want time.Time
	}{
		{"a Unix time", http.Header{"X-Ratelimit-Remaining": {"3"}, "X-Ratelimit-Reset": {"1767225661"}}, time.Unix(1767225661, 0).UTC()},
		{"delta seconds", http.Header{"Ratelimit-Remaining": {"3"}, "Ratelimit-Reset": {"10"}}, date.Add(10 * time.Second)},
		{"an IETF t=", http.Header{"Ratelimit": {`"d";r=3;t=20`}}, date.Add(20 * time.Second)},
		{"no Date", http.Header{"X-Ratelimit-Remaining": {"3"}, "X-Ratelimit-Reset": {"1767225661"}}, time.Time{}},
	}
	for _, c := range cases {
		if c.name != "no Date" {
			c.h.Set("Date", date.Format(http.TimeFormat))
		}
		for _, skew := range []time.Duration{0, 1700 * time.Millisecond, -2300 * time.Millisecond} {
			r := Parse(http.StatusOK, c.h, nil, date.Add(skew))
			if !r.ServerReset.Equal(c.want) {
				t.Errorf("%s, parsed %v off the Date: ServerReset %v, want %v", c.name, skew, r.ServerReset, c.want)
			}
		}
	}
}
