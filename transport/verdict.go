package transport

import (
	"bytes"
	"net/http"
	"time"
)

// verdict is what RoundTrip does with one attempt's outcome.
type verdict int

const (
	// deliver hands the answer to the caller.
	deliver verdict = iota
	// failWith returns the send's error to the caller.
	failWith
	// anotherCredential goes again at once: the credential was rejected
	// and the pool has others.
	anotherCredential
	// noCredentialLeft fails: every credential of the pool is rejected.
	noCredentialLeft
	// waitAndRetry goes again once the quota state allows: the server
	// refused the request for a rate limit, and the refusal's wait is
	// already in the state, where the next acquire finds it.
	waitAndRetry
	// backOffAndRetry goes again after a delay: a server error or a
	// failed send.
	backOffAndRetry
)

// outcome is what deciding about an attempt needs: what it came to, and
// what the request allows. No I/O, no clock.
type outcome struct {
	attemptOutcome
	idempotent, replayable      bool
	errRetries, limitRetries    int // retries spent so far
	maxRetries, maxLimitRetries int
	retryCap                    time.Duration
}

// attemptOutcome is what one attempt came to.
type attemptOutcome struct {
	sendFailed bool // no answer: the round trip returned an error
	cancelled  bool // the request's context ended
	status     int
	limited    bool // a rate-limit refusal (headers.Reading.Limited)
	// rejected: a 401 that the provider (and its "who am I" request)
	// confirmed is about the credential; noneLeft: the pool has no
	// eligible credential after it.
	rejected, noneLeft bool
	// hidden: a 404 or 403 from a credential that may not see the
	// request's owner, and another that may is left (route.go).
	hidden        bool
	retryAfter    time.Duration
	hasRetryAfter bool
	// notProcessed: the server says it did not process the request (an
	// overloaded server), so even a POST may go again.
	notProcessed bool
}

// OverloadRetries is the least number of resends of a request an
// overloaded server refused (it did not process it): at least MaxRetries.
// At a fifth of attempts overloaded, MaxRetries' default (3) left one
// request in 16 batches of 40 unanswered; 8 leaves one in millions.
const OverloadRetries = 8

// StatusOverloaded is Anthropic's 529: the server is overloaded and did
// not process the request.
const StatusOverloaded = 529

// notProcessed reports whether an answer says the server did not process
// its request: a 529, or a 503 whose body (its first bytes, body) says the
// server is overloaded (OpenAI's "The engine is currently overloaded").
func notProcessed(status int, body []byte) bool {
	switch status {
	case StatusOverloaded:
		return true
	case http.StatusServiceUnavailable:
		return bytes.Contains(bytes.ToLower(body), []byte("overloaded"))
	}
	return false
}

// decision is a verdict with, for backOffAndRetry, its delay: the
// server's Retry-After, or (jitter) a backoff the caller draws (full
// jitter, see Transport.backoff).
type decision struct {
	verdict verdict
	delay   time.Duration
	jitter  bool
}

// decide is the whole retry policy. A failed send is retried with backoff
// when the request is idempotent and can be replayed. A rejected
// credential gives way to another when the request can be replayed. A
// rate-limit refusal is retried even for a POST (a refused request was not
// processed) when it can be replayed. A 5xx is retried with backoff, or
// after its Retry-After when that is within retryCap, when idempotent and
// replayable, or, for any method, when the server says it did not process
// the request (notProcessed: an overloaded server). Retries of each kind
// are bounded.
func decide(o outcome) decision {
	bound := o.maxRetries
	if o.notProcessed && bound >= 0 {
		// An overloaded server processed nothing: another attempt costs
		// only its wait, and giving up loses the caller's work.
		bound = max(bound, OverloadRetries)
	}
	canRetryErr := (o.idempotent || o.notProcessed) && o.replayable && o.errRetries < bound
	switch {
	case o.sendFailed:
		if o.cancelled || !canRetryErr {
			return decision{verdict: failWith}
		}
		return decision{verdict: backOffAndRetry, jitter: true}
	case o.hidden && o.replayable:
		return decision{verdict: anotherCredential}
	case o.status == http.StatusUnauthorized && o.rejected:
		switch {
		case o.noneLeft:
			return decision{verdict: noCredentialLeft}
		case o.replayable:
			return decision{verdict: anotherCredential}
		}
	case o.limited:
		if o.replayable && o.limitRetries < o.maxLimitRetries {
			return decision{verdict: waitAndRetry}
		}
	case o.status >= 500 && canRetryErr:
		if !o.hasRetryAfter {
			return decision{verdict: backOffAndRetry, jitter: true}
		}
		if o.retryAfter <= o.retryCap {
			return decision{verdict: backOffAndRetry, delay: o.retryAfter}
		}
	}
	return decision{verdict: deliver}
}
