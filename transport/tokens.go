package transport

import (
	"bytes"
	"context"
	"io"
	"net/http"
	"strconv"
	"sync"
	"time"

	"github.com/ratekeeper/ratekeeper/headers"
)

// A language model's API charges a request in tokens (see
// provider.TokenPricer): the request is paced by one bucket its answers
// describe (its Meter, e.g. OpenAI's tokens) and reserves there what it is
// estimated to take, as a GraphQL query reserves its points: the prompt's
// characters ÷ 4 (or what answers of its shape taught) plus what the
// server charges whatever the answer (max_tokens). A caller that knows the
// cost says so (WithCost, CostHeader), and that is reserved instead.
// Answers teach: the usage an answer states (prompt_tokens, input_tokens)
// over the prompt's characters is the rate the next request of the shape
// is priced at.

// CostHeader is the request header in which a caller gives a request's
// exact cost, in the units of the bucket that paces it (tokens). It is
// removed before the request is sent.
const CostHeader = "X-Ratekeeper-Cost"

type costKey struct{}

// WithCost returns a context under which a request costs n units (tokens)
// of the bucket that paces it, instead of the estimate.
func WithCost(ctx context.Context, n int64) context.Context {
	return context.WithValue(ctx, costKey{}, n)
}

// costOf is the cost the caller gave req: WithCost, else CostHeader.
func costOf(req *http.Request) (int64, bool) {
	if n, ok := req.Context().Value(costKey{}).(int64); ok && n > 0 {
		return n, true
	}
	if v := req.Header.Get(CostHeader); v != "" {
		if n, err := strconv.ParseInt(v, 10, 64); err == nil && n > 0 {
			return n, true
		}
	}
	return 0, false
}

// maxShapesTaught bounds the shapes whose rate is remembered.
const maxShapesTaught = 4096

// tokenCosts is what answers taught of prompts: per shape (provider,
// model, endpoint), the tokens a prompt character cost.
type tokenCosts struct {
	mu      sync.Mutex
	perChar map[string]float64
}

// rate is the tokens per character taught for key, 0 when none.
func (c *tokenCosts) rate(key string) float64 {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.perChar[key]
}

// learn records that a prompt of chars characters cost tokens.
func (c *tokenCosts) learn(key string, chars, tokens int64) {
	if chars <= 0 || tokens <= 0 {
		return
	}
	c.mu.Lock()
	defer c.mu.Unlock()
	if c.perChar == nil || len(c.perChar) >= maxShapesTaught {
		c.perChar = map[string]float64{}
	}
	c.perChar[key] = float64(tokens) / float64(chars)
}

// tokenNote is what an exchange priced in tokens keeps to learn from its
// answer: the shape's key and the prompt's characters.
type tokenNote struct {
	key   string
	chars int64
}

// priceTokens gives a request to a language model the tokens it reserves
// from the bucket that paces it (see above). The body is read through
// req.GetBody, so the caller's request stays as it was; a request without
// GetBody, or whose API does not price it, reserves one request.
func (x *exchange) priceTokens() {
	req, p := x.req, x.l.p
	if !p.PricesTokens() || req.GetBody == nil || req.ContentLength > maxGraphQLBody {
		return
	}
	body, err := req.GetBody()
	if err != nil {
		return
	}
	b, err := io.ReadAll(io.LimitReader(body, maxGraphQLBody+1))
	body.Close()
	if err != nil || len(b) > maxGraphQLBody {
		return
	}
	tp, ok := p.PriceTokens(req.Method, req.URL, b)
	if !ok {
		return
	}
	key := x.l.key + "\x00" + tp.Shape
	units := tp.Estimate(x.t.tokens.rate(key))
	if n, ok := costOf(req); ok {
		units = n
	}
	x.class.Meter, x.class.Resource, x.class.Units = tp.Meter, tp.Meter, int(units)
	if tp.PromptCounts {
		x.tok = tokenNote{key: key, chars: tp.Chars}
	}
}

// teachTokens makes a successful answer's body, once read to its end,
// teach the prompt's real cost (see usageReader).
func (x *exchange) teachTokens(resp *http.Response) {
	note, costs := x.tok, &x.t.tokens
	if note.key == "" || resp.StatusCode != http.StatusOK || resp.Body == nil || resp.Body == http.NoBody {
		return
	}
	resp.Body = &usageReader{rc: resp.Body, done: func(prompt int64) { costs.learn(note.key, note.chars, prompt) }}
}

// usageTail is how much of an answer's end usageReader keeps: the usage
// object closes an OpenAI or Anthropic answer.
const usageTail = 512

// usageReader passes an answer's body through and, at its end, reads the
// prompt's tokens from the usage it states (prompt_tokens, input_tokens).
type usageReader struct {
	rc   io.ReadCloser
	tail []byte
	done func(prompt int64)
}

func (u *usageReader) Read(p []byte) (int, error) {
	n, err := u.rc.Read(p)
	if n > 0 {
		u.tail = append(u.tail, p[:n]...)
		if len(u.tail) > 2*usageTail {
			u.tail = append(u.tail[:0], u.tail[len(u.tail)-usageTail:]...)
		}
	}
	if err == io.EOF && u.done != nil {
		for _, key := range []string{`"prompt_tokens"`, `"input_tokens"`} {
			if v, ok := jsonCount(u.tail, key); ok {
				u.done(v)
				break
			}
		}
		u.done = nil
	}
	return n, err
}

func (u *usageReader) Close() error { return u.rc.Close() }

// jsonCount finds "key": N (a non-negative integer) in a JSON fragment.
func jsonCount(b []byte, key string) (int64, bool) {
	i := bytes.LastIndex(b, []byte(key))
	if i < 0 {
		return 0, false
	}
	rest := bytes.TrimLeft(b[i+len(key):], " \t\r\n")
	if len(rest) == 0 || rest[0] != ':' {
		return 0, false
	}
	rest = bytes.TrimLeft(rest[1:], " \t\r\n")
	j := 0
	for j < len(rest) && rest[j] >= '0' && rest[j] <= '9' {
		j++
	}
	n, err := strconv.ParseInt(string(rest[:j]), 10, 64)
	return n, err == nil
}

// otherLimit makes a refusal that names another limit than the meter's
// (OpenAI's requests, Anthropic's input tokens) a pause of the meter's
// bucket until the time it names, without its counts: they are another
// bucket's, in other units.
func otherLimit(r *headers.Reading, meter string, now time.Time) {
	if r.Limited != headers.Primary || r.Resource == "" || r.Resource == meter {
		return
	}
	if !r.HasRetryAfter && r.HasReset() {
		r.RetryAfter, r.HasRetryAfter = max(r.Reset.Sub(now), 0), true
	}
	r.Limit, r.Remaining, r.Used, r.Reset, r.Window = headers.UnknownCount, headers.UnknownCount, headers.UnknownCount, time.Time{}, 0
	r.Resource = meter
}

// showTokenPool gives an answer to a request priced in tokens the pool's
// view of the bucket that paces it, in the IETF draft's fields naming
// its unit: RateLimit-Policy: "tokens";q=LIMIT;qu="tokens" and
// RateLimit: "tokens";r=REMAINING;t=SECONDS, summed over the pool's
// distinct buckets. The server's own fields of those names, if any, move
// to X-Ratekeeper-Upstream-. The per-kind fields the server sent
// (x-ratelimit-remaining-tokens…) pass unchanged.
func (x *exchange) showTokenPool(h http.Header, now time.Time) {
	f := x.t.figures(x.l, x.pool, x.class.Resource, now)
	if !f.known {
		return
	}
	for _, name := range []string{"Ratelimit-Policy", "Ratelimit"} {
		if v := h[name]; v != nil {
			h[HeaderUpstreamPrefix+name] = v
		}
	}
	name := strconv.Quote(x.class.Meter)
	h["Ratelimit-Policy"] = []string{name + ";q=" + strconv.FormatInt(f.limit, 10) + `;qu="` + x.class.Meter + `"`}
	v := name + ";r=" + strconv.FormatInt(f.remaining, 10)
	if !f.reset.IsZero() {
		v += ";t=" + strconv.FormatInt(ceilSeconds(f.reset.Sub(now)), 10)
	}
	h["Ratelimit"] = []string{v}
}
