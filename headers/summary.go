package headers

import (
	"fmt"
	"math"
	"strings"
	"time"
)

// Summary is a Reading in the JSON form `ratekeeper explain --json` prints.
// Unknown counts (UnknownCount) are null.
type Summary struct {
	Limit             *int64   `json:"limit"`
	Remaining         *int64   `json:"remaining"`
	Used              *int64   `json:"used"`
	ResetUnix         *int64   `json:"reset_unix"` // seconds, rounded up
	RetryAfterSeconds *float64 `json:"retry_after_seconds"`
	Resource          *string  `json:"resource"`
	RateLimited       bool     `json:"rate_limited"`
	LimitKind         *string  `json:"limit_kind"` // "primary", "secondary", "bare" or null
	WaitSeconds       float64  `json:"wait_seconds"`
	ServerTime        *string  `json:"server_time"` // RFC 3339
	HeadersUsed       []string `json:"headers_used"`
}

// Summarize converts a reading to its JSON form.
func (r *Reading) Summarize() Summary {
	s := Summary{
		Limit:       countPtr(r.Limit),
		Remaining:   countPtr(r.Remaining),
		Used:        countPtr(r.Used),
		RateLimited: r.Limited != NotLimited,
		WaitSeconds: seconds(r.Wait),
		HeadersUsed: r.HeadersUsed,
	}
	if s.HeadersUsed == nil {
		s.HeadersUsed = []string{}
	}
	if r.HasReset() {
		sec := r.Reset.Unix()
		if r.Reset.Nanosecond() > 0 {
			sec++
		}
		s.ResetUnix = &sec
	}
	if r.HasRetryAfter {
		v := seconds(r.RetryAfter)
		s.RetryAfterSeconds = &v
	}
	if r.Resource != "" {
		v := r.Resource
		s.Resource = &v
	}
	if r.Limited != NotLimited {
		v := r.Limited.String()
		s.LimitKind = &v
	}
	if !r.ServerTime.IsZero() {
		v := r.ServerTime.UTC().Format(time.RFC3339)
		s.ServerTime = &v
	}
	return s
}

func countPtr(v int64) *int64 {
	if v == UnknownCount {
		return nil
	}
	return &v
}

// seconds converts a duration to seconds with millisecond precision, so
// JSON shows 1.5 rather than 1.5000000001.
func seconds(d time.Duration) float64 {
	return math.Round(d.Seconds()*1000) / 1000
}

var dialectNames = map[Dialect]string{
	DialectGitHub:    "GitHub",
	DialectGitLab:    "GitLab",
	DialectIETF:      "IETF RateLimit",
	DialectIETFOld:   "RateLimit-* (earlier IETF draft)",
	DialectDiscord:   "Discord-style",
	DialectQualified: "Per-kind X-RateLimit",
	DialectXRate:     "X-RateLimit",
	DialectRetry:     "Retry-After",
}

// Describe explains the reading in plain English, as of now. The first line
// is the verdict; the following lines give details.
func (r *Reading) Describe(now time.Time) string {
	var b strings.Builder
	name := dialectNames[r.Dialect]
	switch {
	case r.Limited == Primary:
		if name == "" || r.Dialect == DialectRetry {
			name = "Server"
		}
		fmt.Fprintf(&b, "%s primary rate limit exceeded", name)
	case r.Limited == Secondary:
		if name == "" || r.Dialect == DialectRetry {
			name = "Server"
		}
		fmt.Fprintf(&b, "%s secondary rate limit hit", name)
	case r.Limited == Bare:
		fmt.Fprintf(&b, "Refused (HTTP %d) without stating any limit: a pause, not a spent quota", r.Status)
	case !r.HasInfo():
		fmt.Fprintf(&b, "No rate-limit information in this response (HTTP %d)", r.Status)
	default:
		fmt.Fprintf(&b, "%s rate limit", name)
	}
	if r.Resource != "" {
		fmt.Fprintf(&b, " (resource %s)", r.Resource)
	}
	var parts []string
	switch {
	case r.Remaining != UnknownCount && r.Limit != UnknownCount:
		parts = append(parts, fmt.Sprintf("%d of %d left", r.Remaining, r.Limit))
	case r.Remaining != UnknownCount:
		parts = append(parts, fmt.Sprintf("%d left", r.Remaining))
	case r.Limit != UnknownCount:
		parts = append(parts, fmt.Sprintf("limit %d", r.Limit))
	}
	if r.Used != UnknownCount {
		parts = append(parts, fmt.Sprintf("%d used", r.Used))
	}
	if r.HasReset() {
		parts = append(parts, "resets "+r.Reset.UTC().Format(time.RFC3339)+" ("+relative(r.Reset.Sub(now))+")")
	}
	if r.HasRetryAfter {
		parts = append(parts, "retry after "+formatDuration(r.RetryAfter))
	}
	if len(parts) > 0 {
		b.WriteString(": ")
		b.WriteString(strings.Join(parts, "; "))
	}
	b.WriteString(". ")
	if r.Wait > 0 {
		fmt.Fprintf(&b, "Wait %s before the next request.", formatDuration(r.Wait))
	} else {
		b.WriteString("No wait needed before the next request.")
	}
	if r.Window > 0 {
		fmt.Fprintf(&b, "\n  window: %s", formatDuration(r.Window))
	}
	if r.PollInterval > 0 {
		fmt.Fprintf(&b, "\n  poll interval: at most one poll every %s (X-Poll-Interval)", formatDuration(r.PollInterval))
	}
	if !r.ServerTime.IsZero() {
		fmt.Fprintf(&b, "\n  server time: %s", r.ServerTime.UTC().Format(time.RFC3339))
		if skew := r.ServerTime.Sub(now); skew.Abs() >= 2*time.Second {
			fmt.Fprintf(&b, " (%s %s the clock used here)", formatDuration(skew.Abs()), map[bool]string{true: "ahead of", false: "behind"}[skew > 0])
		}
	}
	if len(r.HeadersUsed) > 0 {
		fmt.Fprintf(&b, "\n  headers used: %s", strings.Join(r.HeadersUsed, ", "))
	}
	return b.String()
}

func relative(d time.Duration) string {
	if d < 0 {
		return formatDuration(-d) + " ago"
	}
	return "in " + formatDuration(d)
}

// formatDuration prints a duration the way people read it: 12m34s, 1.5s,
// 250ms, 2h0m0s.
func formatDuration(d time.Duration) string {
	switch {
	case d >= time.Second:
		return d.Round(time.Millisecond).String()
	case d <= 0:
		return "0s"
	default:
		return d.Round(time.Millisecond).String()
	}
}
