package transport

import (
	"testing"
	"time"
)

// TestDecide is the retry policy, without any I/O.
func TestDecide(t *testing.T) {
	get := outcome{idempotent: true, replayable: true, maxRetries: 3, maxLimitRetries: 10, retryCap: time.Minute}
	post := get
	post.idempotent = false
	stream := get // a body that cannot be sent again
	stream.replayable = false
	with := func(base outcome, a attemptOutcome) outcome { base.attemptOutcome = a; return base }
	spent := func(base outcome, errs, limits int) outcome {
		base.errRetries, base.limitRetries = errs, limits
		return base
	}
	for _, c := range []struct {
		name string
		o    outcome
		want decision
	}{
		{"200", with(get, attemptOutcome{status: 200}), decision{verdict: deliver}},
		{"404", with(get, attemptOutcome{status: 404}), decision{verdict: deliver}},
		{"send failed", with(get, attemptOutcome{sendFailed: true}), decision{verdict: backOffAndRetry, jitter: true}},
		{"send failed, cancelled", with(get, attemptOutcome{sendFailed: true, cancelled: true}), decision{verdict: failWith}},
		{"send failed, POST", with(post, attemptOutcome{sendFailed: true}), decision{verdict: failWith}},
		{"send failed, retries spent", with(spent(get, 3, 0), attemptOutcome{sendFailed: true}), decision{verdict: failWith}},
		{"503", with(get, attemptOutcome{status: 503}), decision{verdict: backOffAndRetry, jitter: true}},
		{"503 Retry-After 5s", with(get, attemptOutcome{status: 503, hasRetryAfter: true, retryAfter: 5 * time.Second}), decision{verdict: backOffAndRetry, delay: 5 * time.Second}},
		{"503 Retry-After 0", with(get, attemptOutcome{status: 503, hasRetryAfter: true}), decision{verdict: backOffAndRetry}},
		{"503 Retry-After beyond the cap", with(get, attemptOutcome{status: 503, hasRetryAfter: true, retryAfter: time.Hour}), decision{verdict: deliver}},
		{"503 POST", with(post, attemptOutcome{status: 503}), decision{verdict: deliver}},
		{"529 POST (not processed)", with(post, attemptOutcome{status: 529, notProcessed: true}), decision{verdict: backOffAndRetry, jitter: true}},
		{"503 overloaded POST", with(post, attemptOutcome{status: 503, notProcessed: true, hasRetryAfter: true, retryAfter: 2 * time.Second}), decision{verdict: backOffAndRetry, delay: 2 * time.Second}},
		{"529 POST after MaxRetries: overloads have more", with(spent(post, 3, 0), attemptOutcome{status: 529, notProcessed: true}), decision{verdict: backOffAndRetry, jitter: true}},
		{"529 POST, retries spent", with(spent(post, OverloadRetries, 0), attemptOutcome{status: 529, notProcessed: true}), decision{verdict: deliver}},
		{"500 GET after MaxRetries", with(spent(get, 3, 0), attemptOutcome{status: 500}), decision{verdict: deliver}},
		{"529 unreplayable body", with(stream, attemptOutcome{status: 529, notProcessed: true}), decision{verdict: deliver}},
		{"503 retries spent", with(spent(get, 3, 0), attemptOutcome{status: 503}), decision{verdict: deliver}},
		{"429", with(get, attemptOutcome{status: 429, limited: true}), decision{verdict: waitAndRetry}},
		{"429 POST (not processed)", with(post, attemptOutcome{status: 429, limited: true}), decision{verdict: waitAndRetry}},
		{"429 unreplayable body", with(stream, attemptOutcome{status: 429, limited: true}), decision{verdict: deliver}},
		{"429 retries spent", with(spent(get, 0, 10), attemptOutcome{status: 429, limited: true}), decision{verdict: deliver}},
		{"401 rejected", with(get, attemptOutcome{status: 401, rejected: true}), decision{verdict: anotherCredential}},
		{"401 rejected, none left", with(get, attemptOutcome{status: 401, rejected: true, noneLeft: true}), decision{verdict: noCredentialLeft}},
		{"401 rejected, unreplayable body", with(stream, attemptOutcome{status: 401, rejected: true}), decision{verdict: deliver}},
		{"401 not about the token", with(get, attemptOutcome{status: 401}), decision{verdict: deliver}},
	} {
		if got := decide(c.o); got != c.want {
			t.Errorf("%s: %+v, want %+v", c.name, got, c.want)
		}
	}
}

func TestNotProcessed(t *testing.T) {
	for _, c := range []struct {
		status int
		body   string
		want   bool
	}{
		{529, `{"type":"error","error":{"type":"overloaded_error","message":"Overloaded"}}`, true},
		{529, ``, true},
		{503, `{"error":{"message":"The engine is currently overloaded, please try again later.","type":"server_error"}}`, true},
		{503, `Service Unavailable`, false},
		{500, `overloaded`, false},
		{200, `overloaded`, false},
	} {
		if got := notProcessed(c.status, []byte(c.body)); got != c.want {
			t.Errorf("notProcessed(%d, %q) = %v, want %v", c.status, c.body, got, c.want)
		}
	}
}
