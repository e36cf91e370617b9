package provider

import (
	"net/http"
	"net/url"
)

// OpenAI is the kind of OpenAI's API and of the hosts that speak it.
const OpenAI Kind = "openai"

// OpenAIAPI is the built-in openai provider's base URL.
const OpenAIAPI = "https://api.openai.com/v1"

// openaiAPI is what ratekeeper knows of OpenAI's API: a Bearer key from
// OPENAI_API_KEY; buckets of requests and of tokens per organization,
// announced by x-ratelimit-{limit,remaining,reset}-{requests,tokens} with
// duration resets; the organization every answer names in
// openai-organization, so keys of one organization share its buckets
// (asked once per key with GET /models, which costs one request).
type openaiAPI struct{ GenericAPI }

func (openaiAPI) Kind() Kind { return OpenAI }

func (openaiAPI) Builtin() Builtin { return Builtin{Name: "openai", BaseURL: OpenAIAPI} }

func (openaiAPI) TokenEnv(string, *url.URL) []string { return []string{"OPENAI_API_KEY"} }

// Secondary: OpenAI announces every limit it has; the concurrency bound
// only keeps a batch from opening hundreds of connections.
func (openaiAPI) Secondary() Secondary {
	return Secondary{MaxConcurrency: 50, ReadPoints: 1, WritePoints: 1}
}

// Classify puts every request in one bucket, "api": the organization's
// requests and tokens are shared by every endpoint of a model family.
func (openaiAPI) Classify(method, _ string) Request {
	return Request{Resource: "api", Write: isWrite(method)}
}

// Group is none: OpenAI announces its limits in every answer.
func (openaiAPI) Group(string, string) string { return "" }

// WhoAmIURL is GET /models: its answer names the key's organization in
// openai-organization (see OwnerFromHeader).
func (openaiAPI) WhoAmIURL(base *url.URL) *url.URL { return below(base, "/models") }

// ParseOwner finds no owner in a body: OpenAI names it in a header.
func (openaiAPI) ParseOwner([]byte) (Owner, error) { return Owner{}, errNoOwnerInBody }

// OwnerFromHeader is the organization an answer names.
func (openaiAPI) OwnerFromHeader(h http.Header) (Owner, bool) {
	if org := h.Get("Openai-Organization"); org != "" && len(org) <= 256 {
		return Owner{ID: "org:" + org, Name: org}, true
	}
	return Owner{}, false
}

// RejectsToken: OpenAI answers 401 only about the key.
func (openaiAPI) RejectsToken(http.Header, []byte) bool { return true }

// openaiDefaultMaxTokens is what a chat request without max_tokens is
// taken to reserve: OpenAI charges what the model may write.
const openaiDefaultMaxTokens = 4096

// PriceTokens: a chat, completion or embeddings request is paced by the
// tokens bucket, charged its prompt plus max_tokens when admitted, and
// draws 1 of requests at once.
func (openaiAPI) PriceTokens(method, rel string, body []byte) (TokenPrice, bool) {
	if method != "POST" {
		return TokenPrice{}, false
	}
	b, chars, ok := readLLMBody(body)
	if !ok {
		return TokenPrice{}, false
	}
	fixed := int64(0)
	if len(b.Messages) > 0 || len(b.Prompt) > 0 {
		fixed = b.maxTokens(openaiDefaultMaxTokens)
	}
	return TokenPrice{Meter: "tokens", Shape: b.Model + " " + rel, Chars: chars, Fixed: fixed, PromptCounts: true,
		Draws: []TokenDraw{{Meter: "requests", Fixed: 1}}}, true
}
