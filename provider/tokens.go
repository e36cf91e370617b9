package provider

import (
	"encoding/json"
	"net/url"
	"strings"
	"unicode/utf8"
)

// CharsPerToken is the default estimate of a prompt's tokens: its
// characters ÷ 4, the rule of thumb OpenAI and Anthropic give for English.
const CharsPerToken = 4

// TokenPricer is an API that charges requests to a language model in
// tokens: it says which of the buckets its answers describe paces a
// request, and what the request will take from it.
type TokenPricer interface {
	// PriceTokens prices a request with this method, path below the base
	// URL and body; false leaves it counted in requests.
	PriceTokens(method, rel string, body []byte) (TokenPrice, bool)
}

// TokenPrice is what [TokenPricer.PriceTokens] says of a request.
type TokenPrice struct {
	// Meter is the qualifier of the bucket that paces it ("tokens").
	Meter string
	// Shape groups requests whose estimates err alike (the model and the
	// endpoint): what one answer teaches applies to the next of its shape.
	Shape string
	// Chars are the characters of the prompt; Fixed the tokens the
	// request takes whatever the prompt (max_tokens, where charged at
	// admission); PromptCounts says whether the prompt is charged from
	// Meter at all.
	Chars        int64
	Fixed        int64
	PromptCounts bool
	// Draws are the other buckets the request is charged from when it is
	// admitted, each with what it takes of it (OpenAI's requests;
	// Anthropic's requests and input tokens): it is reserved from all of
	// them at once, and waits for the one with least to spare.
	Draws []TokenDraw
}

// TokenDraw is a bucket a request is charged from beside its Meter.
type TokenDraw struct {
	// Meter is the bucket's qualifier ("requests", "input-tokens").
	Meter string
	// Fixed is what the request takes whatever its prompt (1 of
	// requests); PromptCounts adds the prompt's estimate (input tokens).
	Fixed        int64
	PromptCounts bool
}

// Estimate is what the draw takes, given the tokens a character of its
// request's prompt proved to cost (0: CharsPerToken).
func (d TokenDraw) Estimate(tp TokenPrice, tokensPerChar float64) int64 {
	return TokenPrice{Chars: tp.Chars, Fixed: d.Fixed, PromptCounts: d.PromptCounts}.Estimate(tokensPerChar)
}

// Estimate is the tokens the request is expected to take, given the
// tokens a character of its shape proved to cost (0: CharsPerToken).
func (tp TokenPrice) Estimate(tokensPerChar float64) int64 {
	n := tp.Fixed
	if tp.PromptCounts {
		if tokensPerChar > 0 {
			n += int64(float64(tp.Chars)*tokensPerChar + 0.999)
		} else {
			n += (tp.Chars + CharsPerToken - 1) / CharsPerToken
		}
	}
	return max(n, 1)
}

// PricesTokens reports whether the provider's API prices requests in
// tokens (see [TokenPricer]).
func (p *Provider) PricesTokens() bool {
	_, ok := p.api.(TokenPricer)
	return ok
}

// PriceOpenAITokens prices a request to u as OpenAI's API would charge
// it: for a host no provider names that answers in OpenAI's headers
// (x-ratelimit-remaining-tokens), such as Groq, vLLM or Azure OpenAI at a
// custom domain.
func (p *Provider) PriceOpenAITokens(method string, u *url.URL, body []byte) (TokenPrice, bool) {
	return openaiAPI{}.PriceTokens(strings.ToUpper(method), p.relPath(u), body)
}

// PriceTokens prices a request to u with this method and body (see
// [TokenPricer]); false when the API does not, or not this request.
func (p *Provider) PriceTokens(method string, u *url.URL, body []byte) (TokenPrice, bool) {
	tp, ok := p.api.(TokenPricer)
	if !ok {
		return TokenPrice{}, false
	}
	return tp.PriceTokens(strings.ToUpper(method), p.relPath(u), body)
}

// llmBody is the part of a chat, messages or embeddings request that
// prices it.
type llmBody struct {
	Model    string `json:"model"`
	Messages []struct {
		Content json.RawMessage `json:"content"`
	} `json:"messages"`
	System              json.RawMessage `json:"system"`
	Input               json.RawMessage `json:"input"`
	Prompt              json.RawMessage `json:"prompt"`
	MaxTokens           *int64          `json:"max_tokens"`
	MaxCompletionTokens *int64          `json:"max_completion_tokens"`
}

// readLLMBody reads a request body; false when it is not a JSON object
// naming a model.
func readLLMBody(body []byte) (llmBody, int64, bool) {
	var b llmBody
	if json.Unmarshal(body, &b) != nil || b.Model == "" {
		return b, 0, false
	}
	chars := textChars(b.System) + textChars(b.Input) + textChars(b.Prompt)
	for _, m := range b.Messages {
		chars += textChars(m.Content)
	}
	return b, chars, true
}

// maxTokens is the answer's bound the request asks for, or def.
func (b llmBody) maxTokens(def int64) int64 {
	switch {
	case b.MaxCompletionTokens != nil:
		return max(*b.MaxCompletionTokens, 0)
	case b.MaxTokens != nil:
		return max(*b.MaxTokens, 0)
	}
	return def
}

// textChars counts the characters of a content value: a string, an array
// of strings, or an array of parts whose "text" fields count.
func textChars(raw json.RawMessage) int64 {
	if len(raw) == 0 {
		return 0
	}
	var s string
	if json.Unmarshal(raw, &s) == nil {
		return int64(utf8.RuneCountInString(s))
	}
	var parts []json.RawMessage
	if json.Unmarshal(raw, &parts) != nil {
		return 0
	}
	var n int64
	for _, p := range parts {
		var part struct {
			Text string `json:"text"`
		}
		if json.Unmarshal(p, &s) == nil {
			n += int64(utf8.RuneCountInString(s))
		} else if json.Unmarshal(p, &part) == nil {
			n += int64(utf8.RuneCountInString(part.Text))
		}
	}
	return n
}
