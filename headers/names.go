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
	if info, ok := classifyExact(lower); ok {
		return info
	}
	return classifyFamily(lower)
}

// classifyExact knows the names that are not read word by word; false
// when lower is none of them.
func classifyExact(lower string) (nameInfo, bool) {
	info := nameInfo{lower: lower}
	switch lower {
	case "retry-after":
		info.field = fRetryAfter
	case "retry-after-ms", "x-ms-retry-after-ms":
		info.field, info.millis = fRetryAfterMillis, true
	case "date":
		info.field = fDate
	case "x-poll-interval":
		info.field = fPollInterval
	case "ratelimit":
		info.field = fStructured
	case "ratelimit-policy":
		info.field = fStructuredPolicy
	default:
		switch {
		case strings.HasPrefix(lower, "x-github-"):
			info.field = fGitHubMarker
		case strings.HasSuffix(lower, "-api-call-limit"):
			info.field = fCallLimit
		default:
			return info, false
		}
	}
	return info, true
}

// classifyFamily reads a [vendor-]ratelimit-<words> name word by word.
func classifyFamily(lower string) nameInfo {
	i, n := strings.Index(lower, "ratelimit"), len("ratelimit")
	if j := strings.Index(lower, "rate-limit"); j >= 0 && (i < 0 || j < i) {
		i, n = j, len("rate-limit")
	}
	if i < 0 || (i > 0 && lower[i-1] != '-') {
		return nameInfo{lower: lower}
	}
	rest := lower[i+n:]
	if rest == "" && i > 0 {
		// Zendesk's X-Rate-Limit: 700 states the limit alone.
		return nameInfo{lower: lower, field: fLimit}
	}
	if len(rest) < 2 || rest[0] != '-' {
		return nameInfo{lower: lower}
	}
	info := nameInfo{lower: lower, legacy: i == 0}
	w := familyWords{lower: lower, qualStart: -1, qualEnd: -1}
	pos := i + n + 1
	for _, tok := range strings.Split(rest[1:], "-") {
		if !w.add(tok, pos, &info, i == 0) {
			return nameInfo{lower: lower}
		}
		pos += len(tok) + 1
	}
	f := w.resolve()
	if f == fNone {
		return nameInfo{lower: lower}
	}
	info.field, info.qual = f, w.qualifier()
	return info
}

// familyWords collects what the words of a family name say. Qualifier
// words are kept as byte ranges of the name, so the usual one-run
// qualifier costs no allocation.
type familyWords struct {
	lower        string
	field        field
	after, retry bool
	qualStart    int // start of the current run of qualifier words; -1 for none yet
	qualEnd      int
	qualJoined   []string // earlier runs, when field words split the qualifier
}

// add reads one word, which starts at byte start of the name, into w and
// info; bare says the name has no vendor prefix. It reports false when the
// name is not one we understand.
func (w *familyWords) add(tok string, start int, info *nameInfo, bare bool) bool {
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
		info.gitlab = bare
	case "after":
		w.after = true
		return true
	case "retry":
		w.retry = true
		return true
	case "ms":
		info.millis = true
		return true
	case "policy", "scope", "global", "":
		// Discord's scope and global flags and vendor policy names
		// do not change a count; ignore the whole header.
		return false
	default:
		w.addQualifier(start, len(tok))
		return true
	}
	if w.field != fNone && w.field != tf {
		return false // two field words: not a name we understand
	}
	w.field = tf
	return true
}

// addQualifier adds the qualifier word at lower[start:start+n], extending
// the current run when it follows it directly.
func (w *familyWords) addQualifier(start, n int) {
	if w.qualStart >= 0 && w.qualEnd != start-1 {
		w.qualJoined = append(w.qualJoined, w.lower[w.qualStart:w.qualEnd])
		w.qualStart = start
	} else if w.qualStart < 0 {
		w.qualStart = start
	}
	w.qualEnd = start + n
}

// resolve is the field the words name together; fNone when they name
// none, or one we do not understand.
func (w *familyWords) resolve() field {
	switch {
	case w.retry && w.after && w.field == fNone:
		return fFamilyRetryAfter
	case w.field == fReset && w.after:
		return fResetAfter
	case w.after || w.retry:
		return fNone
	case w.field == fNone && w.qualStart >= 0:
		return fQualifierOnly
	}
	return w.field
}

// qualifier is the qualifier words in order, joined by "-".
func (w *familyWords) qualifier() string {
	if w.qualStart < 0 {
		return ""
	}
	last := w.lower[w.qualStart:w.qualEnd]
	if len(w.qualJoined) > 0 {
		return strings.Join(append(w.qualJoined, last), "-")
	}
	return last
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
