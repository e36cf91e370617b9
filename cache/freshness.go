package cache

import (
	"net/http"
	"strconv"
	"strings"
	"time"
)

// Use says how a stored response may answer a request (RFC 9111 §4).
type Use int

const (
	// MustRevalidate: the stored response must not be used before the server
	// confirms it (a conditional request): it is stale and the request
	// accepts no staleness, or the request or the response asks for
	// validation (no-cache), or it states no freshness lifetime.
	MustRevalidate Use = iota
	// ServeFresh: the stored response may be used without asking the server.
	ServeFresh
	// ServeStale: the stored response is stale, but the request's
	// max-stale accepts its staleness and the response allows that (no
	// must-revalidate). It may be used without asking the server; a
	// rate-keeping client uses it only when asking would wait for quota.
	ServeStale
)

func (u Use) String() string {
	switch u {
	case ServeFresh:
		return "fresh"
	case ServeStale:
		return "stale-accepted"
	}
	return "revalidate"
}

// Stored is what freshness needs of a stored response: its header fields
// (with those of any 304 that revalidated it merged in) and when the
// request that got it was sent and its answer came, on the cache's clock.
type Stored struct {
	Header       http.Header
	RequestTime  time.Time
	ResponseTime time.Time
}

// Freshness is the verdict of Evaluate.
type Freshness struct {
	Use Use
	// Age is the stored response's current age (RFC 9111 §4.2.3), which
	// an answer served from the cache carries in its Age field.
	Age time.Duration
	// Lifetime is its freshness lifetime (§4.2.1); 0 when it states none.
	Lifetime time.Duration
}

// Evaluate says whether the stored response s may answer a request with
// header fields req at now, without asking the server (RFC 9111 §4.2 and
// §5.2). shared is true for a shared cache, which takes s-maxage over
// max-age and honours proxy-revalidate.
//
// The freshness lifetime is the response's s-maxage (shared caches only),
// else its max-age, else Expires minus Date. There is no heuristic
// freshness: an API answer that states no lifetime may change at any
// moment, and a revalidation of it costs nothing where a 304 is free.
//
// The request's directives narrow or widen that (§5.2.1): no-cache (or
// Pragma: no-cache without Cache-Control) and no-store always revalidate;
// max-age=N accepts a response no older than N seconds; min-fresh=N one
// that stays fresh N seconds more; max-stale (=N) one stale by at most N
// seconds (any staleness without a value). The response's no-cache always
// revalidates, and must-revalidate (proxy-revalidate in a shared cache)
// refuses max-stale.
func Evaluate(s Stored, req http.Header, now time.Time, shared bool) Freshness {
	resp := parseDirectives(s.Header["Cache-Control"])
	f := Freshness{Age: currentAge(s, now)}
	f.Lifetime = lifetime(s.Header, resp, shared)
	if resp.has("no-cache") || resp.has("no-store") {
		return f
	}
	rq := parseDirectives(req["Cache-Control"])
	if rq.has("no-cache") || rq.has("no-store") {
		return f
	}
	if len(req["Cache-Control"]) == 0 && hasDirective(req["Pragma"], "no-cache") {
		return f
	}
	if maxAge, ok := rq.seconds("max-age"); ok && f.Age > maxAge {
		return f
	}
	left := f.Lifetime - f.Age
	if minFresh, ok := rq.seconds("min-fresh"); ok {
		left -= minFresh
	}
	if left > 0 {
		f.Use = ServeFresh
		return f
	}
	if resp.has("must-revalidate") || (shared && resp.has("proxy-revalidate")) {
		return f
	}
	if v, ok := rq.value("max-stale"); ok {
		if v == "" {
			f.Use = ServeStale
			return f
		}
		if maxStale, ok := deltaSeconds(v); ok && -left <= maxStale {
			f.Use = ServeStale
		}
	}
	return f
}

// currentAge is RFC 9111 §4.2.3's current_age: the age the response had
// when it arrived (the larger of what its Date says and what its Age
// field plus the round trip say), plus the time it has been stored.
func currentAge(s Stored, now time.Time) time.Duration {
	var apparent time.Duration
	if date, err := http.ParseTime(s.Header.Get("Date")); err == nil {
		apparent = max(0, s.ResponseTime.Sub(date))
	}
	var ageValue time.Duration
	if v, ok := deltaSeconds(strings.TrimSpace(s.Header.Get("Age"))); ok {
		ageValue = v
	}
	responseDelay := max(0, s.ResponseTime.Sub(s.RequestTime))
	initial := max(apparent, ageValue+responseDelay)
	return initial + max(0, now.Sub(s.ResponseTime))
}

// lifetime is RFC 9111 §4.2.1's freshness_lifetime, without heuristics.
// An invalid max-age or Expires makes the response stale (a lifetime of
// 0), as §4.2.1 and §5.3 say.
func lifetime(h http.Header, d directives, shared bool) time.Duration {
	if shared {
		if v, ok := d.value("s-maxage"); ok {
			n, _ := deltaSeconds(v)
			return n
		}
	}
	if v, ok := d.value("max-age"); ok {
		n, _ := deltaSeconds(v)
		return n
	}
	if exp := h.Get("Expires"); exp != "" {
		expires, err := http.ParseTime(exp)
		if err != nil {
			return 0
		}
		date, err := http.ParseTime(h.Get("Date"))
		if err != nil {
			return 0
		}
		return max(0, expires.Sub(date))
	}
	return 0
}

// directives are the directives of Cache-Control field values, in order,
// names in lower case, quoted arguments unquoted.
type directives []directive

type directive struct{ name, value string }

func parseDirectives(values []string) directives {
	var d directives
	for _, v := range values {
		for v != "" {
			var item string
			item, v = nextItem(v)
			name, arg, _ := strings.Cut(item, "=")
			name = strings.ToLower(strings.TrimSpace(name))
			if name == "" {
				continue
			}
			arg = strings.TrimSpace(arg)
			if len(arg) >= 2 && arg[0] == '"' && arg[len(arg)-1] == '"' {
				arg = arg[1 : len(arg)-1]
			}
			d = append(d, directive{name, arg})
		}
	}
	return d
}

// nextItem splits the first comma-separated item off v, keeping commas
// inside a quoted string (no-cache="Set-Cookie, X-Foo").
func nextItem(v string) (item, rest string) {
	quoted := false
	for i := 0; i < len(v); i++ {
		switch v[i] {
		case '"':
			quoted = !quoted
		case ',':
			if !quoted {
				return v[:i], v[i+1:]
			}
		}
	}
	return v, ""
}

func (d directives) has(name string) bool {
	_, ok := d.value(name)
	return ok
}

// value returns the first directive named name's argument.
func (d directives) value(name string) (string, bool) {
	for _, x := range d {
		if x.name == name {
			return x.value, true
		}
	}
	return "", false
}

// seconds returns a directive's delta-seconds argument; ok is false when
// the directive is absent or its argument is not a number.
func (d directives) seconds(name string) (time.Duration, bool) {
	v, ok := d.value(name)
	if !ok {
		return 0, false
	}
	return deltaSeconds(v)
}

// maxDelta is the largest delta-seconds value, which larger ones stand
// for (RFC 9111 §1.2.2): 2³¹ seconds, far enough from a Duration's limit
// that sums and differences of ages cannot overflow.
const maxDelta = (1 << 31) * time.Second

// deltaSeconds parses RFC 9111 §1.2.2 delta-seconds: digits only.
func deltaSeconds(v string) (time.Duration, bool) {
	if v == "" || strings.TrimLeft(v, "0123456789") != "" {
		return 0, false
	}
	n, err := strconv.ParseInt(v, 10, 64)
	if err != nil || n >= int64(maxDelta/time.Second) {
		return maxDelta, true
	}
	return time.Duration(n) * time.Second, true
}
