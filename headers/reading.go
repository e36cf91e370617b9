package headers

import (
	"time"
)

// Limited tells whether a response refused its request for rate limiting
// and, if so, which kind of limit refused it.
type Limited uint8

const (
	// NotLimited: the response was not a rate-limit refusal.
	NotLimited Limited = iota
	// Primary: refused because the quota the headers describe is used up
	// (or, with no headers, because of the server's one announced limit).
	Primary
	// Secondary: refused by another limit — GitHub's secondary limits
	// (concurrency, points per minute, content creation), or a 429 while
	// the announced quota still had requests left.
	Secondary
	// Bare: refused, with no word of any quota — no count and no reset
	// in the headers (a Retry-After alone may come), and no secondary-limit
	// message. A proxy or abuse filter in front of an API answers so
	// (a 429 or 403 page), as do GitLab's headerless 429 and its plain
	// "Retry later". It is a pause of the scope refused, never a sign
	// that the quota is spent: the next reading that states a count is
	// the truth.
	Bare
)

// String returns "none", "primary", "secondary" or "bare".
func (l Limited) String() string {
	switch l {
	case Primary:
		return "primary"
	case Secondary:
		return "secondary"
	case Bare:
		return "bare"
	default:
		return "none"
	}
}

// UnknownCount is the value of a count the response did not state.
const UnknownCount int64 = -1

// Dialect names the family of rate-limit headers a response used.
type Dialect string

// The dialects Parse recognises. DialectNone means the response carried no
// rate-limit information at all.
const (
	DialectNone      Dialect = ""
	DialectGitHub    Dialect = "github"
	DialectGitLab    Dialect = "gitlab"
	DialectIETF      Dialect = "ietf"       // RateLimit / RateLimit-Policy structured fields
	DialectIETFOld   Dialect = "ietf-draft" // RateLimit-Limit/-Remaining/-Reset of the earlier drafts
	DialectDiscord   Dialect = "discord"
	DialectQualified Dialect = "x-ratelimit-qualified" // per-kind headers: -requests, -tokens, -minute...
	DialectXRate     Dialect = "x-ratelimit"
	DialectRetry     Dialect = "retry-after" // only Retry-After
)

// Reading is what one response says about the rate limits of the request
// that produced it. Counts are UnknownCount and times zero when not stated.
type Reading struct {
	// Status is the response's HTTP status code.
	Status int
	// Limit is the quota of the bucket, in requests (or the server's
	// units) per window.
	Limit int64
	// Remaining is how much of the quota is left.
	Remaining int64
	// Used is how much of the quota has been spent, as the server said.
	Used int64
	// Reset is when the bucket refills, as an absolute time on the clock
	// of the now passed to Parse (see the package doc on clock skew).
	Reset time.Time
	// Window is the length of the quota window when the server states it
	// (RateLimit-Policy w=, or a -minute/-hour/-day header).
	Window time.Duration
	// RetryAfter is the server's explicit request to wait (Retry-After,
	// retry-after-ms, *-retry-after, or a JSON body's retry_after); valid
	// when HasRetryAfter.
	RetryAfter    time.Duration
	HasRetryAfter bool
	// Resource names the bucket: GitHub's x-ratelimit-resource, GitLab's
	// RateLimit-Name, Discord's bucket, an IETF policy name, or the
	// qualifier of per-kind headers ("requests", "tokens").
	Resource string
	// Limited tells whether this response itself refused the request for
	// rate limiting, and which kind of limit did.
	Limited Limited
	// ServerTime is the response's Date, zero when absent or malformed.
	ServerTime time.Time
	// ServerReset is Reset on the server's own clock, zero without a
	// Date: an instant as stated, a delay from the Date. Unlike Reset it
	// does not depend on the now passed to Parse, so readings of one
	// window agree on it whatever each client's estimate of the server's
	// clock (see quota.Read).
	ServerReset time.Time
	// PollInterval is GitHub's X-Poll-Interval: the least time between
	// polls of this resource. It is a floor for pollers, not part of Wait.
	PollInterval time.Duration
	// Wait is the least time a client should wait before its next request,
	// judging by this reading alone. Never negative.
	Wait time.Duration
	// Dialect is the family of headers the reading came from.
	Dialect Dialect
	// HeadersUsed lists, in lower case and sorted, the header fields that
	// contributed to the reading.
	HeadersUsed []string
}

// HasReset reports whether the response stated when the bucket refills.
func (r *Reading) HasReset() bool { return !r.Reset.IsZero() }

// Exhausted reports whether the response said no quota is left.
func (r *Reading) Exhausted() bool { return r.Remaining == 0 }

// HasInfo reports whether the response carried any rate-limit information.
func (r *Reading) HasInfo() bool {
	return r.Limit != UnknownCount || r.Remaining != UnknownCount || r.Used != UnknownCount ||
		r.HasReset() || r.HasRetryAfter || r.Limited != NotLimited
}
