package sim

import (
	"encoding/json"
	"hash/fnv"
	"math"
	"unicode"
)

// The simulator's tokenizers. A real API counts a prompt with its model's
// tokenizer, which no client has: English runs 3 to 5 characters a token
// depending on the model and the text, other scripts fewer, and every
// message of a chat costs a few tokens of framing beyond its text (OpenAI's
// cookbook counts 3 a message and 3 to prime the answer). So each model the
// simulator is asked for gets its own characters-per-token ratio, drawn
// from the API's seed between 3 and 5; each text is then counted at that
// ratio scaled by a factor between 0.9 and 1.1 drawn from a hash of the
// text itself; a message adds its framing. The same seed, model and body
// always cost the same; a client that estimates characters ÷ 4 is wrong by
// up to a quarter, more for short messages, and learns only from the
// usage the answers state.

// Framing tokens: each message (its role and delimiters), the system
// prompt when there is one, and the answer's priming once a request.
const (
	tokensPerMessage = 4
	tokensPerPrompt  = 3
)

// tokenizer counts tokens as one model does.
type tokenizer struct {
	// perToken is the characters of plain ASCII text a token holds.
	perToken float64
	// salt makes the per-text factor the model's own.
	salt uint64
}

// tokenizer is the tokenizer of model on this API: its ratio is drawn
// from the API's seed and the model's name.
func (a *api) tokenizer(model string) tokenizer {
	x := splitmix64(a.seed ^ seedOf("tokenizer", model))
	return tokenizer{perToken: 3 + 2*unitFloat(x), salt: x}
}

// unitFloat maps x onto [0, 1).
func unitFloat(x uint64) float64 { return float64(x>>11) / (1 << 53) }

// chatMessage is what the tokenizer reads of a chat message.
type chatMessage struct {
	Content json.RawMessage `json:"content"`
	Name    string          `json:"name"`
}

// llmRequest is the part of a chat, messages or embeddings body the
// simulator reads.
type llmRequest struct {
	Model               string          `json:"model"`
	Messages            []chatMessage   `json:"messages"`
	System              json.RawMessage `json:"system"`
	Input               json.RawMessage `json:"input"`
	MaxTokens           *int64          `json:"max_tokens"`
	MaxCompletionTokens *int64          `json:"max_completion_tokens"`
}

// prompt counts a chat's prompt: its system prompt and messages with
// their framing, and the answer's priming.
func (t tokenizer) prompt(system json.RawMessage, msgs []chatMessage) int64 {
	n := int64(tokensPerPrompt)
	if s := t.content(system); s > 0 {
		n += tokensPerMessage + s
	}
	for _, m := range msgs {
		n += tokensPerMessage + t.content(m.Content)
		if m.Name != "" {
			n += 1 + t.text(m.Name)
		}
	}
	return n
}

// content counts a content value, whatever its form: a string, or a list
// of strings and parts whose text counts (a part without text, such as an
// image, counts nothing here).
func (t tokenizer) content(raw json.RawMessage) int64 {
	var v any
	if len(raw) == 0 || json.Unmarshal(raw, &v) != nil {
		return 0
	}
	return t.value(v)
}

func (t tokenizer) value(v any) int64 {
	switch v := v.(type) {
	case string:
		return t.text(v)
	case []any:
		var n int64
		for _, e := range v {
			n += t.value(e)
		}
		return n
	case map[string]any:
		if s, ok := v["text"].(string); ok {
			return t.text(s)
		}
	}
	return 0
}

// text counts one text: ASCII letters, digits, spaces and punctuation at
// the model's ratio, any other character (accents, other scripts, emoji)
// at nearly a token each, all scaled by the text's own factor.
func (t tokenizer) text(s string) int64 {
	if s == "" {
		return 0
	}
	var units float64
	for _, r := range s {
		switch {
		case r < unicode.MaxASCII:
			units++
		default:
			units += 0.8 * t.perToken
		}
	}
	h := fnv.New64a()
	_, _ = h.Write([]byte(s))
	factor := 0.9 + 0.2*unitFloat(splitmix64(h.Sum64()^t.salt))
	return max(int64(math.Ceil(units/t.perToken*factor)), 1)
}
