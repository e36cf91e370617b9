package headers

import (
	"math"
	"net/http"
	"strconv"
	"strings"
	"time"
)

// Thresholds of the bare-number rule (see the package doc).
const (
	epochSecondsMin = 1e9 // 2001-09-09: no delta is this long, no reset this early
	maxExactNumber  = 1 << 53
)

// epochThresholds return the bare-number rule's bounds at now: a number
// nearer to now's Unix time than to zero is a Unix time (in seconds, or in
// milliseconds when nearer to now's Unix milliseconds); anything smaller is
// delta seconds. Today that draws the line in 1998, and a clock that is
// not today's — a test's fake clock at 2000-01-01 — keeps working. A clock
// before 1976 is not believed: the fixed 2001 line applies.
func epochThresholds(now time.Time) (seconds, millis float64) {
	sec := float64(now.Unix())
	if sec < 2e8 {
		return epochSecondsMin, epochSecondsMin * 1000
	}
	return sec / 2, sec * 1000 / 2
}

// cleanValue trims optional whitespace and one pair of surrounding double
// quotes, which some servers put around numbers and dates.
func cleanValue(s string) string {
	s = strings.TrimSpace(s)
	if len(s) >= 2 && s[0] == '"' && s[len(s)-1] == '"' {
		s = strings.TrimSpace(s[1 : len(s)-1])
	}
	return s
}

// parseNumber parses a non-negative decimal number written as digits with at
// most one decimal point ("5000", "598.0", ".5"). Signs, exponents, hex,
// "Inf" and "NaN" are rejected: no rate-limit header uses them, and a value
// that needs them is garbage.
func parseNumber(s string) (float64, bool) {
	s = cleanValue(s)
	if s == "" || len(s) > 32 {
		return 0, false
	}
	digits, dot := 0, false
	for i := 0; i < len(s); i++ {
		c := s[i]
		switch {
		case c >= '0' && c <= '9':
			digits++
		case c == '.' && !dot:
			dot = true
		default:
			return 0, false
		}
	}
	if digits == 0 {
		return 0, false
	}
	v, err := strconv.ParseFloat(s, 64)
	if err != nil {
		return 0, false
	}
	if v > maxExactNumber {
		return 0, false
	}
	return v, true
}

// parseCount parses a count (limit, remaining, used). Fractions are rounded
// down for remaining and limit and up for used, so the result never
// overstates what is left.
func parseCount(s string, roundUp bool) (int64, bool) {
	v, ok := parseNumber(s)
	if !ok {
		return 0, false
	}
	if roundUp {
		return int64(math.Ceil(v)), true
	}
	return int64(math.Floor(v)), true
}

// secondsToDuration converts fractional seconds to a Duration, saturating
// instead of overflowing.
func secondsToDuration(sec float64) time.Duration {
	if sec >= float64(math.MaxInt64)/float64(time.Second) {
		return time.Duration(math.MaxInt64)
	}
	return time.Duration(math.Round(sec * float64(time.Second)))
}

// parseDurationString accepts Go-style duration strings as OpenAI and others
// send them ("6m0s", "1m20.5s", "20ms", "1h2m"). It requires a unit so bare
// numbers keep their own rule.
func parseDurationString(s string) (time.Duration, bool) {
	if s == "" {
		return 0, false
	}
	last := s[len(s)-1]
	if last < 'a' || last > 'z' {
		return 0, false
	}
	if s[0] != '.' && (s[0] < '0' || s[0] > '9') {
		return 0, false
	}
	d, err := time.ParseDuration(s)
	if err != nil || d < 0 {
		return 0, false
	}
	return d, true
}

// isoLayouts are RFC 3339 and the ISO 8601 near misses APIs send: no
// seconds (Jira's "2023-09-28T12:00Z"), no zone (taken as UTC), a space
// for the T.
var isoLayouts = []string{
	time.RFC3339Nano,
	"2006-01-02T15:04Z07:00",
	"2006-01-02T15:04:05.999999999",
	"2006-01-02 15:04:05Z07:00",
	"2006-01-02 15:04:05",
}

// parseDate accepts the three HTTP-date forms of RFC 9110 (IMF-fixdate,
// RFC 850, asctime) and RFC 3339 timestamps.
func parseDate(s string) (time.Time, bool) {
	if len(s) < 8 {
		return time.Time{}, false
	}
	if s[0] >= '0' && s[0] <= '9' {
		for _, layout := range isoLayouts {
			if t, err := time.Parse(layout, s); err == nil {
				return t.UTC(), true
			}
		}
		return time.Time{}, false
	}
	if t, err := http.ParseTime(s); err == nil {
		return t.UTC(), true
	}
	return time.Time{}, false
}

// epochToTime converts a Unix time in seconds, or in milliseconds when
// isMillis, to a time.Time.
func epochToTime(v float64, isMillis bool) time.Time {
	if isMillis {
		v /= 1000
	}
	sec := math.Floor(v)
	return time.Unix(int64(sec), int64((v-sec)*1e9)).UTC()
}

// parseInstant reads a reset-like value as an absolute time: a bare number
// by the bare-number rule (delta seconds from now, or a Unix time), a
// duration string (from now), an RFC 3339 timestamp or an HTTP-date. unit
// scales a bare delta (time.Millisecond for *-ms headers).
func parseInstant(s string, now time.Time, unit time.Duration) (time.Time, bool) {
	t, _, ok := parseInstantOrDelay(s, now, unit)
	return t, ok
}

// parseInstantOrDelay is parseInstant, and reports whether the value was a
// delay from now rather than an instant.
func parseInstantOrDelay(s string, now time.Time, unit time.Duration) (t time.Time, delay, ok bool) {
	s = cleanValue(s)
	if v, ok := parseNumber(s); ok {
		secMin, msMin := epochThresholds(now)
		switch {
		case v >= msMin:
			return epochToTime(v, true), false, true
		case unit == time.Millisecond:
			return now.Add(time.Duration(math.Round(v * float64(time.Millisecond)))), true, true
		case v >= secMin:
			return epochToTime(v, false), false, true
		}
		return now.Add(secondsToDuration(v)), true, true
	}
	if d, ok := parseDurationString(s); ok {
		return now.Add(d), true, true
	}
	t, ok = parseDate(s)
	return t, false, ok
}

// parseDelay reads a Retry-After-like value as a wait from now: delta
// seconds (fractions allowed), a duration string, or an absolute time (an
// HTTP-date, RFC 3339, or a bare number large enough to be a Unix time).
// Absolute times in the past give 0.
func parseDelay(s string, now time.Time, unit time.Duration) (time.Duration, bool) {
	t, ok := parseInstant(s, now, unit)
	if !ok {
		return 0, false
	}
	d := t.Sub(now)
	if d < 0 {
		d = 0
	}
	return d, true
}

// eachValue calls fn for every value of a header: each field line, and, when
// a line does not parse whole, each of its comma-separated parts (proxies
// join repeated fields with commas). HTTP-dates contain a comma, so a line
// is always tried whole first.
func eachValue(lines []string, parse func(string) bool) bool {
	any := false
	for _, line := range lines {
		if parse(line) {
			any = true
			continue
		}
		if strings.IndexByte(line, ',') < 0 && strings.IndexByte(line, ';') < 0 {
			continue
		}
		rest := line
		for rest != "" {
			part := rest
			if i := strings.IndexByte(rest, ','); i >= 0 {
				part, rest = rest[:i], rest[i+1:]
			} else {
				rest = ""
			}
			// Drop structured-field parameters of older drafts
			// ("10;w=1") so the leading number still counts.
			if i := strings.IndexByte(part, ';'); i >= 0 {
				part = part[:i]
			}
			if parse(part) {
				any = true
			}
		}
	}
	return any
}

// ServerTime returns the time in a response's Date header, if it has a
// valid one.
func ServerTime(h http.Header) (time.Time, bool) {
	v := h.Values("Date")
	if len(v) == 0 {
		return time.Time{}, false
	}
	return parseDate(cleanValue(v[0]))
}
