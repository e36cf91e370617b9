package transport

import (
	"bytes"
	"encoding/json"
	"io"
	"mime"
	"net/http"

	"github.com/ratekeeper/ratekeeper/headers"
)

// An answer from a language model states in its body what the request
// used (OpenAI's usage.prompt_tokens, Anthropic's usage.input_tokens and
// output_tokens). When its headers state the buckets' remaining counts,
// those already count it. When they do not (a proxy that strips them, a
// host that sends none), the reservation would otherwise stand as
// estimated: Anthropic's output tokens at max_tokens though the answer
// wrote a tenth of them. So a successful answer that is one JSON document
// (not a stream of events) of at most maxUsageBody bytes is read before
// its reservation is settled, its usage settles each bucket the headers
// leave uncounted, and the caller reads the same bytes after. A streamed
// answer is never read ahead of its caller: its reservation stands as
// estimated, and the usage it ends with teaches the next estimate when
// the caller reads it to its end (see usageReader).

// maxUsageBody bounds the answer read ahead for its usage.
const maxUsageBody = 1 << 20

// usage is what an answer's body says the request used; -1 when unsaid.
type usage struct {
	prompt, output int64
}

// answerUsage is the usage object of an answer's body.
type answerUsage struct {
	Usage *struct {
		PromptTokens             *int64 `json:"prompt_tokens"`
		CompletionTokens         *int64 `json:"completion_tokens"`
		InputTokens              *int64 `json:"input_tokens"`
		OutputTokens             *int64 `json:"output_tokens"`
		CacheCreationInputTokens int64  `json:"cache_creation_input_tokens"`
	} `json:"usage"`
}

// parseUsage reads the usage of an OpenAI or Anthropic answer.
func parseUsage(b []byte) (usage, bool) {
	var a answerUsage
	if json.Unmarshal(b, &a) != nil || a.Usage == nil {
		return usage{}, false
	}
	u := usage{prompt: -1, output: -1}
	switch {
	case a.Usage.PromptTokens != nil:
		u.prompt = *a.Usage.PromptTokens
	case a.Usage.InputTokens != nil:
		// Anthropic counts tokens written to its prompt cache as input.
		u.prompt = *a.Usage.InputTokens + a.Usage.CacheCreationInputTokens
	}
	switch {
	case a.Usage.CompletionTokens != nil:
		u.output = *a.Usage.CompletionTokens
	case a.Usage.OutputTokens != nil:
		u.output = *a.Usage.OutputTokens
	}
	return u, u.prompt >= 0 || u.output >= 0
}

// units is what a bucket of this meter was charged, by the usage: the
// output tokens written, the input tokens read, or what the request is
// charged whatever its answer (fixed: max_tokens on OpenAI's tokens) plus
// its prompt; 0 when the usage does not say (the reservation stands).
func (u usage) units(meter string, fixed int64, promptCounts bool) int64 {
	switch {
	case meter == "output-tokens":
		return max(u.output, 0)
	case meter == "input-tokens":
		return max(u.prompt, 0)
	case promptCounts && u.prompt >= 0:
		return fixed + u.prompt
	}
	return 0
}

// settleFromUsage reads a successful answer's usage ahead of its caller
// when its headers leave a bucket it drew from uncounted (see above), and
// sets what each such bucket is settled with; it reports whether it read
// the usage (which then taught the estimate already).
func (x *exchange) settleFromUsage(resp *http.Response, settled *headers.Reading) bool {
	if resp.StatusCode != http.StatusOK || !jsonAnswer(resp) {
		return false
	}
	need := settled.Remaining == headers.UnknownCount
	for _, r := range x.tok.reads {
		need = need || r.Remaining == headers.UnknownCount
	}
	if !need {
		return false
	}
	b, err := io.ReadAll(io.LimitReader(resp.Body, maxUsageBody+1))
	if err != nil || len(b) > maxUsageBody {
		resp.Body = &replayBody{Reader: io.MultiReader(bytes.NewReader(b), errOr(err, resp.Body)), closer: resp.Body}
		return false
	}
	resp.Body = &replayBody{Reader: bytes.NewReader(b), closer: resp.Body}
	u, ok := parseUsage(b)
	if !ok {
		return false
	}
	if settled.Remaining == headers.UnknownCount {
		if n := u.units(x.class.Meter, x.tok.fixed, x.tok.promptCounts); n > 0 {
			x.grant.units = n
		}
	}
	x.tok.drawUnits = x.tok.drawUnits[:0]
	for i, d := range x.tok.draws {
		var n int64
		if i < len(x.tok.reads) && x.tok.reads[i].Remaining == headers.UnknownCount {
			n = u.units(d.meter, d.fixed, d.promptCounts)
		}
		x.tok.drawUnits = append(x.tok.drawUnits, n)
	}
	if x.tok.key != "" && u.prompt > 0 {
		x.t.tokens.learn(x.tok.key, x.tok.chars, u.prompt)
	}
	return true
}

// jsonAnswer reports whether an answer is one JSON document of a length
// the read ahead allows (unknown lengths are read up to the bound).
func jsonAnswer(resp *http.Response) bool {
	if resp.Body == nil || resp.Body == http.NoBody || resp.ContentLength > maxUsageBody {
		return false
	}
	mt, _, err := mime.ParseMediaType(resp.Header.Get("Content-Type"))
	return err == nil && (mt == "application/json" || len(mt) > 5 && mt[len(mt)-5:] == "+json")
}

// errOr is a reader that fails with err, or r when err is nil.
func errOr(err error, r io.Reader) io.Reader {
	if err != nil {
		return errReader{err}
	}
	return r
}
