package headers

import (
	"bytes"
	"net/http"
	"time"
)

// maxBody is how much of a body Parse looks at.
const maxBody = 8 << 10

// bodySignal is what a refusal's body says about rate limiting.
type bodySignal struct {
	rateLimited   bool // a rate-limit message or problem type
	secondary     bool // GitHub's secondary-limit message or documentation URL
	github        bool // GitHub's documentation URL
	retryAfter    time.Duration
	hasRetryAfter bool // a JSON "retry_after" (Discord and others), in seconds, or a delay the message states
	// limit is the qualifier of the limit the refusal names: "requests",
	// "tokens", "input-tokens" or "output-tokens" (OpenAI's error type,
	// the language-model APIs' messages), "" when it names none.
	limit string
	page  bool // a 403 whose body is a page for people, not the API's error (see isPage)
}

// Phrases, in lower case, that mark a body as a rate-limit refusal. The
// secondary ones are GitHub's documented messages and documentation
// anchors for secondary (formerly "abuse") limits, and the IETF draft's
// abnormal-usage problem type.
var (
	secondaryPhrases = []string{
		"secondary rate limit", "abuse detection", "abuse-rate-limits",
		"secondary-rate-limits", "abnormal-usage-detected",
	}
	rateLimitPhrases = []string{
		"rate limit exceeded", "api rate limit", "rate limit", "rate-limit exceeded",
		"ratelimit exceeded", "rate limited", "ratelimited", "rate_limited",
		"too many requests", "quota exceeded", "quota-exceeded", "exceeded our",
		"throttled", "retry later", "ratelimitexceeded", "resource_exhausted",
		"quotaexceeded", "dailylimitexceeded",
	}
)

// inspectBody reads a response body prefix. Only refusals (403, 429, 420)
// and GraphQL errors in a 200 are inspected: a successful body mentioning
// "rate limit" is content, not a signal.
func inspectBody(status int, body []byte) bodySignal {
	var sig bodySignal
	if len(body) == 0 {
		return sig
	}
	if len(body) > maxBody {
		body = body[:maxBody]
	}
	switch status {
	case 403, 429, 420:
	case 200:
		// GitHub's GraphQL API answers 200 with an error of type
		// RATE_LIMITED when the points budget is spent.
		if bytes.Contains(body, []byte(`"errors"`)) && bytes.Contains(body, []byte(`RATE_LIMITED`)) {
			sig.rateLimited = true
			sig.secondary = containsAnyFold(body, secondaryPhrases)
		}
		return sig
	default:
		return sig
	}
	sig.github = indexFold(body, "docs.github.com") >= 0 || indexFold(body, "developer.github.com") >= 0
	sig.secondary = containsAnyFold(body, secondaryPhrases)
	sig.rateLimited = sig.secondary || containsAnyFold(body, rateLimitPhrases)
	if v, ok := jsonNumberField(body, "retry_after"); ok {
		sig.retryAfter, sig.hasRetryAfter = secondsToDuration(v), true
	} else if d, ok := statedDelay(body); ok {
		sig.retryAfter, sig.hasRetryAfter = d, true
	}
	sig.limit = namedLimit(body)
	return sig
}

// isPage reports a body that is a page for people — HTML, or plain text —
// rather than an API's own error, which is structured (JSON or XML): what
// a proxy or an abuse filter in front of the API answers. The declared
// Content-Type decides; without one, the body's first bytes do. An empty
// body is no page: a 403 that says nothing is the ordinary permission
// answer (a HEAD request's has no body at all).
func isPage(h http.Header, body []byte) bool {
	if len(body) == 0 {
		return false
	}
	if ct := h["Content-Type"]; len(ct) > 0 {
		v := ct[0]
		return hasPrefixFold(v, "text/html") || hasPrefixFold(v, "text/plain") || hasPrefixFold(v, "application/xhtml")
	}
	body = bytes.TrimLeft(body, " \t\r\n")
	switch {
	case len(body) == 0:
		return false
	case body[0] == '{' || body[0] == '[':
		return false
	case len(body) >= 5 && indexFold(body[:5], "<?xml") == 0:
		return false
	}
	return true
}

// statedDelay is the delay a refusal's text asks for: OpenAI's and
// Groq's "Please try again in 2.4s" (a Go-style duration: "20ms",
// "6m0s"), or Gemini's RetryInfo "retryDelay": "13s".
func statedDelay(body []byte) (time.Duration, bool) {
	for _, key := range []string{"try again in ", `"retrydelay":`} {
		i := indexFold(body, key)
		if i < 0 {
			continue
		}
		rest := body[i+len(key):]
		j := 0
		for j < len(rest) && (rest[j] == ' ' || rest[j] == '"') {
			j++
		}
		k := j
		for k < len(rest) && (rest[k] >= '0' && rest[k] <= '9' || rest[k] == '.' || rest[k] >= 'a' && rest[k] <= 'z' || rest[k] == 0xc2 || rest[k] == 0xb5) {
			k++
		}
		if d, ok := parseDurationString(string(bytes.TrimRight(rest[j:k], "."))); ok {
			return d, true
		}
	}
	return 0, false
}

// limitPhrases name a language-model API's limits in its refusals'
// messages, most specific first: "… of 50,000 input tokens per minute"
// (Anthropic), "on tokens per min (TPM)", "on requests per day (RPD)"
// (OpenAI, Groq).
var limitPhrases = []struct{ phrase, limit string }{
	{"input tokens per", "input-tokens"},
	{"output tokens per", "output-tokens"},
	{"tokens per", "tokens"},
	{"requests per", "requests"},
}

// namedLimit is the limit a refusal names: OpenAI's error "type", else
// the first phrase of limitPhrases its message has.
func namedLimit(body []byte) string {
	for _, t := range []string{"tokens", "requests"} {
		if bytes.Contains(body, []byte(`"type":"`+t+`"`)) || bytes.Contains(body, []byte(`"type": "`+t+`"`)) {
			return t
		}
	}
	for _, lp := range limitPhrases {
		if indexFold(body, lp.phrase) >= 0 {
			return lp.limit
		}
	}
	return ""
}

func containsAnyFold(body []byte, phrases []string) bool {
	for _, p := range phrases {
		if indexFold(body, p) >= 0 {
			return true
		}
	}
	return false
}

// jsonNumberField finds "key": <non-negative number> anywhere in a JSON
// prefix, without decoding the (possibly truncated) document.
func jsonNumberField(body []byte, key string) (float64, bool) {
	quoted := `"` + key + `"`
	for off := 0; off < len(body); {
		i := bytes.Index(body[off:], []byte(quoted))
		if i < 0 {
			return 0, false
		}
		j := off + i + len(quoted)
		off = j
		for j < len(body) && (body[j] == ' ' || body[j] == '\t' || body[j] == '\n' || body[j] == '\r') {
			j++
		}
		if j >= len(body) || body[j] != ':' {
			continue
		}
		j++
		for j < len(body) && (body[j] == ' ' || body[j] == '\t' || body[j] == '\n' || body[j] == '\r') {
			j++
		}
		k := j
		for k < len(body) && (body[k] >= '0' && body[k] <= '9' || body[k] == '.') {
			k++
		}
		if v, ok := parseNumber(string(body[j:k])); ok {
			return v, true
		}
	}
	return 0, false
}
