package provider

import (
	"net/http"
	"net/url"
	"strings"
)

// Anthropic is the kind of Anthropic's API.
const Anthropic Kind = "anthropic"

// AnthropicAPI is the built-in anthropic provider's base URL.
const AnthropicAPI = "https://api.anthropic.com/v1"

// AnthropicVersion is the anthropic-version a request gets when its
// caller sent none: the API refuses a request without one.
const AnthropicVersion = "2023-06-01"

// anthropicAPI is what ratekeeper knows of Anthropic's API: the key from
// ANTHROPIC_API_KEY in x-api-key, an anthropic-version header, buckets of
// requests, input tokens and output tokens per organization announced by
// anthropic-ratelimit-*-{limit,remaining,reset} with RFC 3339 resets, and
// the organization named in anthropic-organization-id.
type anthropicAPI struct{ GenericAPI }

func (anthropicAPI) Kind() Kind { return Anthropic }

func (anthropicAPI) Builtin() Builtin { return Builtin{Name: "anthropic", BaseURL: AnthropicAPI} }

func (anthropicAPI) Auth() Auth { return Auth{Header: "X-Api-Key"} }

func (anthropicAPI) TokenEnv(string, *url.URL) []string { return []string{"ANTHROPIC_API_KEY"} }

// DefaultHeaders: anthropic-version, required on every request.
func (anthropicAPI) DefaultHeaders() http.Header {
	return http.Header{"Anthropic-Version": {AnthropicVersion}}
}

func (anthropicAPI) Secondary() Secondary {
	return Secondary{MaxConcurrency: 50, ReadPoints: 1, WritePoints: 1}
}

// Classify puts every request in one bucket, "api".
func (anthropicAPI) Classify(method, _ string) Request {
	return Request{Resource: "api", Write: isWrite(method)}
}

// Group is none: Anthropic announces its limits in every answer.
func (anthropicAPI) Group(string, string) string { return "" }

// WhoAmIURL is GET /models, whose answer names the organization in
// anthropic-organization-id.
func (anthropicAPI) WhoAmIURL(base *url.URL) *url.URL { return below(base, "/models") }

func (anthropicAPI) ParseOwner([]byte) (Owner, error) { return Owner{}, errNoOwnerInBody }

// OwnerFromHeader is the organization an answer names.
func (anthropicAPI) OwnerFromHeader(h http.Header) (Owner, bool) {
	if org := h.Get("Anthropic-Organization-Id"); org != "" && len(org) <= 256 {
		return Owner{ID: "org:" + org}, true
	}
	return Owner{}, false
}

func (anthropicAPI) RejectsToken(http.Header, []byte) bool { return true }

// PriceTokens: a message is paced by the output-tokens bucket, which it
// takes max_tokens of until its answer ends, and draws at once 1 of
// requests and its prompt of input tokens.
func (anthropicAPI) PriceTokens(method, rel string, body []byte) (TokenPrice, bool) {
	if method != "POST" || !strings.HasSuffix(rel, "/messages") {
		return TokenPrice{}, false
	}
	b, chars, ok := readLLMBody(body)
	if !ok {
		return TokenPrice{}, false
	}
	return TokenPrice{Meter: "output-tokens", Shape: b.Model + " " + rel, Chars: chars, Fixed: b.maxTokens(1),
		Draws: []TokenDraw{{Meter: "requests", Fixed: 1}, {Meter: "input-tokens", PromptCounts: true}}}, true
}
