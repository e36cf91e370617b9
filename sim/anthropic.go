package sim

import (
	"fmt"
	"net/http"
	"time"
)

// anthropicDialect speaks Anthropic's Messages API: auth by x-api-key
// with a required anthropic-version header, and the headers
// anthropic-ratelimit-{requests,input-tokens,output-tokens,tokens}-
// {limit,remaining,reset}, the resets being RFC 3339 times when the
// bucket is full again (the tokens-* ones describe whichever of input and
// output has least left). Input tokens are charged when a request is
// admitted; output tokens are charged max_tokens then, and corrected to
// the real count when the answer ends. A refusal is a 429
// rate_limit_error with retry-after in seconds; an overloaded server
// answers 529 overloaded_error.
type anthropicDialect struct{}

var _ llmDialect = anthropicDialect{}

var anthropicKinds = []string{"requests", "input-tokens", "output-tokens"}

// StatusOverloaded is Anthropic's status for a server that did not
// process the request.
const StatusOverloaded = 529

func (anthropicDialect) credential(r *http.Request) (string, bool) {
	if v := r.Header.Get("X-Api-Key"); v != "" {
		return v, true
	}
	return "", r.Header.Get("Authorization") != ""
}

func (anthropicDialect) route(c *call) endpoint { return llmRoute(c, "messages") }

func (anthropicDialect) headers(c *call, h http.Header) {
	h["Request-Id"] = []string{"req_" + hexID(splitmix64(c.a.seed^c.requestID()), 24)}
	h["Anthropic-Organization-Id"] = []string{hexUUID(seedOf("anthropic-org", ownerName(c)))}
}

func ownerName(c *call) string {
	if c.own == nil {
		return ""
	}
	return c.own.name
}

// hexUUID formats a seed as a UUID.
func hexUUID(h uint64) string {
	s := hexID(h, 32)
	return s[:8] + "-" + s[8:12] + "-" + s[12:16] + "-" + s[16:20] + "-" + s[20:]
}

func (anthropicDialect) rateHeaders(*call, http.Header, bucketState) {}

// check turns away a request without anthropic-version, as the API does.
func (d anthropicDialect) check(c *call) *rendered {
	if c.r.Header.Get("Anthropic-Version") == "" {
		return d.invalid("anthropic-version: header is required")
	}
	return nil
}

func (anthropicDialect) tokenHeaders(h http.Header, now time.Time, states []bucketState) {
	reset := func(st bucketState) string {
		return now.Add(st.full + time.Second - 1).Truncate(time.Second).UTC().Format(time.RFC3339)
	}
	set := func(kind string, st bucketState) {
		h["Anthropic-Ratelimit-"+kind+"-Limit"] = []string{itoa(st.limit)}
		h["Anthropic-Ratelimit-"+kind+"-Remaining"] = []string{itoa(st.remaining)}
		h["Anthropic-Ratelimit-"+kind+"-Reset"] = []string{reset(st)}
	}
	for i, st := range states {
		if st.limit > 0 {
			set(headerWords(anthropicKinds[i]), st)
		}
	}
	if len(states) == 3 && states[1].limit > 0 && states[2].limit > 0 {
		least := states[1]
		if states[2].remaining < least.remaining {
			least = states[2]
		}
		set("Tokens", least)
	}
}

// headerWords capitalizes each word of a dashed header name part.
func headerWords(s string) string { return http.CanonicalHeaderKey(s) }

func (anthropicDialect) costs(ask llmAsk) []int64 {
	return []int64{1, ask.prompt, ask.maxTokens}
}

func (anthropicDialect) outputBucket() int { return 2 }

func anthropicError(status int, typ, msg string) *rendered {
	return jsonBody(status, map[string]any{"type": "error", "error": map[string]string{"type": typ, "message": msg}})
}

func (anthropicDialect) refused(c *call, res int, need int64, st bucketState, wait time.Duration) *rendered {
	what := []string{"requests", "input tokens", "output tokens"}[res]
	per := "per minute"
	if st.window != 60 {
		per = fmt.Sprintf("per %d seconds", st.window)
	}
	if wait < 0 {
		return anthropicError(http.StatusTooManyRequests, "rate_limit_error", fmt.Sprintf(
			"This request would exceed your organization's rate limit of %d %s %s: it asks for %d. Reduce the prompt length or the maximum tokens requested.",
			st.limit, what, per, need))
	}
	rd := anthropicError(http.StatusTooManyRequests, "rate_limit_error", fmt.Sprintf(
		"This request would exceed your organization's rate limit of %d %s %s. For details, refer to: https://docs.claude.com/en/api/rate-limits. You can see the response headers for current usage.",
		st.limit, what, per))
	return rd.with("Retry-After", itoa(ceilSeconds(wait)))
}

func (anthropicDialect) completion(c *call, ask llmAsk, out int64) *rendered {
	if ask.kind == "models" {
		return jsonBody(http.StatusOK, map[string]any{"data": modelsBody("claude-sonnet-4-5", "claude-haiku-4-5"), "has_more": false})
	}
	stop := "end_turn"
	if out == ask.maxTokens {
		stop = "max_tokens"
	}
	return jsonBody(http.StatusOK, map[string]any{
		"id": "msg_" + hexID(splitmix64(c.a.seed^c.requestID()), 24), "type": "message", "role": "assistant",
		"model": ask.model, "content": []map[string]string{{"type": "text", "text": answerText(out)}},
		"stop_reason": stop, "stop_sequence": nil,
		"usage": map[string]int64{"input_tokens": ask.prompt, "output_tokens": out},
	})
}

func (anthropicDialect) overloaded() *rendered {
	return anthropicError(StatusOverloaded, "overloaded_error", "Overloaded")
}

func (anthropicDialect) invalid(msg string) *rendered {
	return anthropicError(http.StatusBadRequest, "invalid_request_error", msg)
}

func (anthropicDialect) unauthorized(_ *call, missing bool) *rendered {
	if missing {
		return anthropicError(http.StatusUnauthorized, "authentication_error", "x-api-key header is required")
	}
	return anthropicError(http.StatusUnauthorized, "authentication_error", "invalid x-api-key")
}

func (d anthropicDialect) exhausted(c *call, st bucketState) *rendered {
	return d.refused(c, c.ep.res, 1, st, 0)
}

func (d anthropicDialect) secondaryRefusal(*call, int) *rendered { return d.overloaded() }
func (d anthropicDialect) endpointRefused(*call) *rendered       { return d.overloaded() }
func (anthropicDialect) throttleHeaders(*call, http.Header, bucketState, string) {
}
func (anthropicDialect) etag([]byte) string                          { return "" }
func (anthropicDialect) tagFor(_ *http.Request, rd *rendered) string { return rd.etag }
