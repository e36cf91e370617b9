package sim

import (
	"fmt"
	"net/http"
	"strconv"
	"time"
)

// openaiDialect speaks OpenAI's chat completions, embeddings and models
// endpoints, with its rate-limit headers: x-ratelimit-{limit,remaining,
// reset}-{requests,tokens}, the resets being how long until the bucket is
// full again as a duration ("1s", "6m0s", "17ms"). A request is charged
// its prompt tokens plus max_tokens when admitted, and nothing is given
// back. Keys of one organization (the token's owner) share its buckets,
// and every answer names it in openai-organization. A refusal is a 429
// whose body names the limit (type "requests" or "tokens") and says
// "Please try again in 2.4s", with retry-after-ms and retry-after.
type openaiDialect struct{}

var _ llmDialect = openaiDialect{}

func (openaiDialect) credential(r *http.Request) (string, bool) { return bearer(r, "Bearer") }

func (openaiDialect) route(c *call) endpoint { return llmRoute(c, "chat/completions") }

func (openaiDialect) headers(c *call, h http.Header) {
	h["X-Request-Id"] = []string{"req_" + hexID(splitmix64(c.a.seed^c.requestID()), 32)}
	h["Openai-Processing-Ms"] = []string{strconv.FormatInt(c.a.latency.Milliseconds(), 10)}
	h["Openai-Version"] = []string{"2020-10-01"}
	if c.own != nil && !c.own.anonymous {
		h["Openai-Organization"] = []string{c.own.name}
	}
}

// openaiDuration writes a duration as OpenAI's reset headers and messages
// do: Go's form, to the millisecond ("17ms", "2.4s", "6m0s").
func openaiDuration(d time.Duration) string {
	return d.Round(time.Millisecond).String()
}

var openaiKinds = []string{"requests", "tokens"}

func (openaiDialect) rateHeaders(c *call, h http.Header, st bucketState) {}

func (openaiDialect) check(*call) *rendered { return nil }

func (openaiDialect) tokenHeaders(h http.Header, _ time.Time, states []bucketState) {
	for i, st := range states {
		if st.limit == 0 {
			continue
		}
		k := openaiKinds[i]
		h["X-Ratelimit-Limit-"+capitalize(k)] = []string{itoa(st.limit)}
		h["X-Ratelimit-Remaining-"+capitalize(k)] = []string{itoa(st.remaining)}
		h["X-Ratelimit-Reset-"+capitalize(k)] = []string{openaiDuration(st.full)}
	}
}

func (openaiDialect) costs(ask llmAsk) []int64 {
	return []int64{1, ask.prompt + ask.maxTokens}
}

func (openaiDialect) outputBucket() int { return -1 }

func openaiError(status int, msg, typ, code string) *rendered {
	var c any
	if code != "" {
		c = code
	}
	return jsonBody(status, map[string]any{"error": map[string]any{"message": msg, "type": typ, "param": nil, "code": c}})
}

func (openaiDialect) refused(c *call, res int, need int64, st bucketState, wait time.Duration) *rendered {
	unit, short := "requests per min (RPM)", "requests"
	if res == 1 {
		unit, short = "tokens per min (TPM)", "tokens"
	}
	if st.window != 60 {
		unit = fmt.Sprintf("%s per %ds", short, st.window)
	}
	if wait < 0 {
		return openaiError(http.StatusTooManyRequests, fmt.Sprintf(
			"Request too large for %s in organization %s on %s: Limit %d, Requested %d. The input or output tokens must be reduced in order to run successfully.",
			"model", c.own.name, unit, st.limit, need), short, "rate_limit_exceeded")
	}
	rd := openaiError(http.StatusTooManyRequests, fmt.Sprintf(
		"Rate limit reached for model in organization %s on %s: Limit %d, Used %d, Requested %d. Please try again in %s. Visit https://platform.openai.com/account/rate-limits to learn more.",
		c.own.name, unit, st.limit, st.used, need, openaiDuration(wait)), short, "rate_limit_exceeded")
	return rd.with("Retry-After-Ms", itoa(wait.Milliseconds())).with("Retry-After", itoa(ceilSeconds(wait)))
}

func (openaiDialect) completion(c *call, ask llmAsk, out int64) *rendered {
	id := c.requestID()
	switch ask.kind {
	case "models":
		return jsonBody(http.StatusOK, map[string]any{"object": "list", "data": modelsBody("gpt-4o-mini", "gpt-4o", "text-embedding-3-small")})
	case "embeddings":
		return jsonBody(http.StatusOK, map[string]any{
			"object": "list", "model": ask.model,
			"data":  []map[string]any{{"object": "embedding", "index": 0, "embedding": []float64{0.0023, -0.0093, 0.0158}}},
			"usage": map[string]int64{"prompt_tokens": ask.prompt, "total_tokens": ask.prompt},
		})
	}
	finish := "stop"
	if out == ask.maxTokens {
		finish = "length"
	}
	return jsonBody(http.StatusOK, map[string]any{
		"id": "chatcmpl-" + hexID(splitmix64(c.a.seed^id), 24), "object": "chat.completion",
		"created": c.now.Unix(), "model": ask.model,
		"choices": []map[string]any{{"index": 0, "finish_reason": finish,
			"message": map[string]any{"role": "assistant", "content": answerText(out)}}},
		"usage": map[string]int64{"prompt_tokens": ask.prompt, "completion_tokens": out, "total_tokens": ask.prompt + out},
	})
}

func (openaiDialect) overloaded() *rendered {
	return openaiError(http.StatusServiceUnavailable, "The engine is currently overloaded, please try again later.", "server_error", "")
}

func (openaiDialect) invalid(msg string) *rendered {
	return openaiError(http.StatusBadRequest, msg, "invalid_request_error", "")
}

func (openaiDialect) unauthorized(_ *call, missing bool) *rendered {
	msg := "Incorrect API key provided. You can find your API key at https://platform.openai.com/account/api-keys."
	if missing {
		msg = "You didn't provide an API key. You need to provide your API key in an Authorization header using Bearer auth (i.e. Authorization: Bearer YOUR_KEY)."
	}
	return openaiError(http.StatusUnauthorized, msg, "invalid_request_error", "invalid_api_key")
}

func (d openaiDialect) exhausted(c *call, st bucketState) *rendered {
	return d.refused(c, c.ep.res, 1, st, 0)
}

func (d openaiDialect) secondaryRefusal(*call, int) *rendered { return d.overloaded() }
func (d openaiDialect) endpointRefused(*call) *rendered       { return d.overloaded() }
func (openaiDialect) throttleHeaders(*call, http.Header, bucketState, string) {
}
func (openaiDialect) etag([]byte) string                          { return "" }
func (openaiDialect) tagFor(_ *http.Request, rd *rendered) string { return rd.etag }
