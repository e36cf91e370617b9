package quota

import (
	"net/http"
	"time"

	"github.com/ratekeeper/ratekeeper/headers"
)

// ReadFor is Read for a request paced by one of the buckets an answer
// describes, named by its headers' qualifier ("tokens"): see
// headers.ParseFor.
func ReadFor(status int, h http.Header, body []byte, now time.Time, skew time.Duration, bucket string) headers.Reading {
	r := headers.ParseFor(status, h, body, now.Add(skew), bucket)
	if skew != 0 && r.HasReset() {
		r.Reset = r.Reset.Add(-skew)
	}
	return r
}
