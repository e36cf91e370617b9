package headers

import (
	"net/http"
	"strings"
)

// field is what a header contributes to a reading.
type field uint8

const (
	fNone field = iota
	fLimit
	fRemaining
	fUsed
	fReset      // a time by the bare-number rule: delta seconds or Unix time
	fResetAfter // always relative to now
	fResource
	fFamilyRetryAfter // x-ratelimit-retry-after and the like
	fRetryAfter       // Retry-After
	fRetryAfterMillis // retry-after-ms, x-ms-retry-after-ms
	fDate
	fPollInterval
	fStructured       // RateLimit
	fStructuredPolicy // RateLimit-Policy
	fGitHubMarker     // any x-github-* header: tells the dialect, nothing else
	fQualifierOnly    // x-hubspot-ratelimit-daily, zendesk-ratelimit-tickets-index: see readQualifierOnly
	fCallLimit        // Shopify's X-Shopify-Shop-Api-Call-Limit: used/limit
)

// nameInfo is the classification of one header name.
type nameInfo struct {
	lower  string // the name in lower case, as reported in HeadersUsed
	field  field
	qual   string // qualifier of per-kind headers: "requests", "tokens", "minute"...
	millis bool   // bare delta values are milliseconds
	gitlab bool   // a name only GitLab sends
	legacy bool   // RateLimit-* without x-: earlier IETF drafts (and GitLab)
}

// knownNames are classified once, so parsing the common dialects allocates
// nothing per header name. Any other name is classified on the fly.
var knownNames = map[string]nameInfo{}

func init() {
	for _, n := range []string{
		"x-ratelimit-limit", "x-ratelimit-remaining", "x-ratelimit-used",
		"x-ratelimit-reset", "x-ratelimit-resource", "x-ratelimit-reset-after",
		"x-ratelimit-bucket", "x-rate-limit-limit", "x-rate-limit-remaining",
		"x-rate-limit-reset", "ratelimit-limit", "ratelimit-remaining",
		"ratelimit-reset", "ratelimit-observed", "ratelimit-resettime",
		"ratelimit-name", "ratelimit", "ratelimit-policy", "retry-after",
		"retry-after-ms", "x-ms-retry-after-ms", "date", "x-poll-interval",
		"x-ratelimit-limit-requests", "x-ratelimit-limit-tokens",
		"x-ratelimit-remaining-requests", "x-ratelimit-remaining-tokens",
		"x-ratelimit-reset-requests", "x-ratelimit-reset-tokens",
		"x-github-request-id", "x-github-media-type", "x-github-api-version-selected",
	} {
		info := classify(n)
		knownNames[n] = info
		knownNames[http.CanonicalHeaderKey(n)] = info
	}
}

// lookupName classifies a header name in any letter case.
func lookupName(name string) nameInfo {
	if info, ok := knownNames[name]; ok {
		return info
	}
	if !mayMatter(name) {
		return nameInfo{}
	}
	return classify(strings.ToLower(name))
}

// mayMatter is a cheap, allocation-free filter: false for names that cannot
// be rate-limit headers.
func mayMatter(name string) bool {
	return indexFold(name, "ratelimit") >= 0 || indexFold(name, "rate-limit") >= 0 ||
		strings.EqualFold(name, "retry-after") || strings.EqualFold(name, "retry-after-ms") ||
		strings.EqualFold(name, "x-ms-retry-after-ms") || strings.EqualFold(name, "date") ||
		strings.EqualFold(name, "x-poll-interval") || hasPrefixFold(name, "x-github-") ||
		indexFold(name, "-api-call-limit") >= 0
}

// classify maps a lower-case header name to what it contributes.
//
// Besides a few exact names, every name of the form
// [vendor-]ratelimit-<words> or [vendor-]rate-limit-<words> is read as a
// field word (limit, remaining, used/observed, reset, reset-after,
// resource/name/bucket, retry-after) plus qualifier words that name a
// separate bucket ("requests", "tokens", "input-tokens", "minute"...), in
// any order: x-ratelimit-limit-requests and anthropic-ratelimit-requests-limit
// both mean "limit of the requests bucket".
func classify(lower string) nameInfo {
	info := nameInfo{lower: lower}
	switch lower {
	case "retry-after":
		info.field = fRetryAfter
		return info
	case "retry-after-ms", "x-ms-retry-after-ms":
		info.field, info.millis = fRetryAfterMillis, true
		return info
	case "date":
		info.field = fDate
		return info
	case "x-poll-interval":
		info.field = fPollInterval
		return info
	case "ratelimit":
		info.field = fStructured
		return info
	case "ratelimit-policy":
		info.field = fStructuredPolicy
		return info
	}
	if strings.HasPrefix(lower, "x-github-") {
		info.field = fGitHubMarker
		return info
	}
	if strings.HasSuffix(lower, "-api-call-limit") {
		info.field = fCallLimit
		return info
	}
	i, n := strings.Index(lower, "ratelimit"), len("ratelimit")
	if j := strings.Index(lower, "rate-limit"); j >= 0 && (i < 0 || j < i) {
		i, n = j, len("rate-limit")
	}
	if i < 0 || (i > 0 && lower[i-1] != '-') {
		return info
	}
	rest := lower[i+n:]
	if rest == "" && i > 0 {
		// Zendesk's X-Rate-Limit: 700 states the limit alone.
		info.field = fLimit
		return info
	}
	if len(rest) < 2 || rest[0] != '-' {
		return info
	}
	info.legacy = i == 0
	var f field
	after, retry := false, false
	qualStart, qualEnd, qualParts := -1, -1, 0
	var qualJoined []string
	pos := i + n + 1
	for _, tok := range strings.Split(rest[1:], "-") {
		start := pos
		pos += len(tok) + 1
		var tf field
		switch tok {
		case "limit", "max":
			tf = fLimit
		case "remaining":
			tf = fRemaining
		case "used", "consumed":
			tf = fUsed
		case "observed":
			tf = fUsed
			info.gitlab = true
		case "reset":
			tf = fReset
		case "resettime":
			tf = fReset
			info.gitlab = true
		case "resource", "bucket":
			tf = fResource
		case "name":
			tf = fResource
			info.gitlab = i == 0
		case "after":
			after = true
			continue
		case "retry":
			retry = true
			continue
		case "ms":
			info.millis = true
			continue
		case "policy", "scope", "global", "":
			// Discord's scope and global flags and vendor policy names
			// do not change a count; ignore the whole header.
			return nameInfo{lower: lower}
		default:
			if qualStart >= 0 && qualEnd != start-1 {
				qualJoined = append(qualJoined, lower[qualStart:qualEnd])
				qualStart = start
			} else if qualStart < 0 {
				qualStart = start
			}
			qualEnd = start + len(tok)
			qualParts++
			continue
		}
		if f != fNone && f != tf {
			return nameInfo{lower: lower} // two field words: not a name we understand
		}
		f = tf
	}
	switch {
	case retry && after && f == fNone:
		f = fFamilyRetryAfter
	case f == fReset && after:
		f = fResetAfter
	case after || retry:
		return nameInfo{lower: lower}
	case f == fNone && qualStart >= 0:
		f = fQualifierOnly
	}
	if f == fNone {
		return nameInfo{lower: lower}
	}
	info.field = f
	if qualStart >= 0 {
		if len(qualJoined) > 0 {
			info.qual = strings.Join(append(qualJoined, lower[qualStart:qualEnd]), "-")
		} else {
			info.qual = lower[qualStart:qualEnd]
		}
	}
	return info
}

// indexFold is strings.Index ignoring ASCII case, without allocating, for
// header names and body bytes alike. sub must be lower case.
func indexFold[T string | []byte](s T, sub string) int {
	n := len(sub)
	for i := 0; i+n <= len(s); i++ {
		j := 0
		for ; j < n; j++ {
			c := s[i+j]
			if 'A' <= c && c <= 'Z' {
				c += 'a' - 'A'
			}
			if c != sub[j] {
				break
			}
		}
		if j == n {
			return i
		}
	}
	return -1
}

func hasPrefixFold(s, prefix string) bool {
	return len(s) >= len(prefix) && strings.EqualFold(s[:len(prefix)], prefix)
}
