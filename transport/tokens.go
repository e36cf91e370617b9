package transport

import (
	"bytes"
	"context"
	"io"
	"math"
	"net/http"
	"strconv"
	"sync"
	"time"

	"github.com/ratekeeper/ratekeeper/headers"
	"github.com/ratekeeper/ratekeeper/provider"
	"github.com/ratekeeper/ratekeeper/quota"
)

// A language model's API charges a request in tokens (see
// provider.TokenPricer): the request is paced by one bucket its answers
// describe (its Meter, e.g. OpenAI's tokens) and reserves there what it is
// estimated to take, as a GraphQL query reserves its points: the prompt's
// characters ÷ 4 (or what answers of its shape taught) plus what the
// server charges whatever the answer (max_tokens). A caller that knows the
// cost of a bucket says so (WithCost, WithCosts, CostHeader), and that is
// reserved from it instead.
// Answers teach: the usage an answer states (prompt_tokens, input_tokens)
// against the prompt's characters fits the shape's cost (see promptCost),
// at which the next request of the shape, and any still waiting, is
// priced.

// maxShapesTaught bounds the shapes whose cost is remembered.
const maxShapesTaught = 4096

// tokenCosts is what answers taught of prompts, per shape (provider,
// model, endpoint): how their tokens grow with their characters, and how
// far the answers strayed from that.
type tokenCosts struct {
	mu     sync.Mutex
	shapes map[string]*promptCost
}

// promptCost fits a shape's prompts as tokens = framing + perChar ×
// characters, from moving averages of the answers it saw (a model's
// tokenizer is its own, and every message costs a few tokens of framing
// beyond its text), and keeps how far answers strayed from the fit: a
// tokenizer counts each text a little differently, which no client can
// predict. An estimate adds that margin, so that the server is rarely
// charged more than was reserved: the bucket's last reading minus what
// was reserved since is then what the server holds, and the next request
// is not sent into a refusal. What a reservation overstates comes back
// when its answer is read.
type promptCost struct {
	n                int
	mx, my, mxx, mxy float64 // moving means of chars, tokens, chars², chars·tokens
	dev              float64 // how far answers strayed from the fit before them, ÷ the fit: the largest, fading
}

// Learning: the weight of a new answer in the moving means is at least
// 1/fitMemory (the first answers alike); the largest error fades by
// 1/spreadMemory of its excess over each new one.
const (
	fitMemory    = 32
	spreadMemory = 16
	// spreadInitial is the spread assumed after one answer.
	spreadInitial = 0.05
	// marginSpreads is how many spreads an estimate adds to the fit.
	marginSpreads = 2
)

// fit is the tokens the shape's fit gives a prompt of x characters.
func (p *promptCost) fit(x float64) float64 {
	ratio := p.my / p.mx
	if p.n >= 3 {
		if v := p.mxx - p.mx*p.mx; v > 0.0025*p.mx*p.mx {
			// The prompts varied by more than 5 %: the framing
			// shows as the intercept.
			b := (p.mxy - p.mx*p.my) / v
			if a := p.my - b*p.mx; b > 0 && a >= 0 {
				return a + b*x
			}
		}
	}
	return ratio * x
}

// rate is the tokens per character an estimate of a prompt of chars
// characters uses for key, margin included; 0 when nothing was taught.
func (c *tokenCosts) rate(key string, chars int64) float64 {
	c.mu.Lock()
	defer c.mu.Unlock()
	p := c.shapes[key]
	if p == nil || chars <= 0 {
		return 0
	}
	return p.fit(float64(chars)) * (1 + marginSpreads*p.dev) / float64(chars)
}

// learn records that a prompt of chars characters cost tokens.
func (c *tokenCosts) learn(key string, chars, tokens int64) {
	if chars <= 0 || tokens <= 0 {
		return
	}
	c.mu.Lock()
	defer c.mu.Unlock()
	if c.shapes == nil || len(c.shapes) >= maxShapesTaught {
		c.shapes = map[string]*promptCost{}
	}
	x, y := float64(chars), float64(tokens)
	p := c.shapes[key]
	if p == nil {
		c.shapes[key] = &promptCost{n: 1, mx: x, my: y, mxx: x * x, mxy: x * y, dev: spreadInitial}
		return
	}
	if f := p.fit(x); f > 0 {
		e := math.Abs(y-f) / f
		p.dev = max(e, p.dev-(p.dev-e)/spreadMemory)
	}
	p.n++
	w := max(1/float64(p.n), 1.0/fitMemory)
	p.mx += (x - p.mx) * w
	p.my += (y - p.my) * w
	p.mxx += (x*x - p.mxx) * w
	p.mxy += (x*y - p.mxy) * w
}

// tokenNote is what an exchange priced in tokens keeps: the other
// buckets it draws from, and what its answer teaches (the shape's key,
// empty when the prompt is charged nowhere, and the prompt's characters).
type tokenNote struct {
	key   string
	chars int64
	draws []tokenDraw
	// reads are the answer's readings of each draw's bucket (readTokens),
	// own the meter's own counts when the refusal named a draw's bucket.
	reads []headers.Reading
	own   headers.Reading
	// openAI: the request was priced as an OpenAI-compatible host's.
	openAI bool
	// fixed and promptCounts are the meter's price (see
	// provider.TokenPrice): what usage.units settles it with.
	fixed        int64
	promptCounts bool
	// price is the request's price, costs what its caller gave, and
	// rate the tokens per prompt character its estimate used.
	price provider.TokenPrice
	costs Costs
	rate  float64
	// drawUnits are what each draw's bucket is settled with, by the
	// answer's usage (settleFromUsage); 0: what it reserved.
	drawUnits []int64
}

// tokenDraw is a bucket a request draws from beside its meter, by its
// qualifier, and what it takes of it.
type tokenDraw struct {
	meter        string
	units        int64
	fixed        int64
	promptCounts bool
}

// priceTokens gives a request to a language model the tokens it reserves
// from the bucket that paces it, and from each other bucket it is charged
// from at admission (see above). The body is read through req.GetBody, so
// the caller's request stays as it was; a request without GetBody, or
// whose API does not price it, reserves one request.
func (x *exchange) priceTokens() {
	x.priceBody()
	if x.class.Meter == "" && x.l.p.PricesTokens() {
		// Any other request to the API (a "who am I", a model list)
		// spends one of the requests a chat draws from too.
		x.class.Meter, x.class.Resource = "requests", "requests"
		// A number alone is in the tokens the caller expected its
		// request to be priced in: only a cost named requests counts.
		if n, ok := costsOf(x.req)["requests"]; ok {
			x.class.Units = int(n)
		}
	}
}

// priceBody prices a request to a language model from its body.
func (x *exchange) priceBody() {
	req, p := x.req, x.l.p
	openAI := x.l.speaksOpenAI.Load()
	if !p.PricesTokens() && !openAI || req.GetBody == nil || req.ContentLength > maxGraphQLBody {
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
	var tp provider.TokenPrice
	var ok bool
	if p.PricesTokens() {
		tp, ok = p.PriceTokens(req.Method, req.URL, b)
	} else {
		tp, ok = p.PriceOpenAITokens(req.Method, req.URL, b)
	}
	if !ok {
		return
	}
	key := x.l.key + "\x00" + tp.Shape
	rate := x.t.tokens.rate(key, tp.Chars)
	x.class.Meter, x.class.Resource = tp.Meter, tp.Meter
	x.tok = tokenNote{openAI: openAI, fixed: tp.Fixed, promptCounts: tp.PromptCounts, price: tp, costs: costsOf(req)}
	learns := tp.PromptCounts
	for _, d := range tp.Draws {
		x.tok.draws = append(x.tok.draws, tokenDraw{meter: d.Meter, fixed: d.Fixed, promptCounts: d.PromptCounts})
		learns = learns || d.PromptCounts
	}
	if learns {
		x.tok.key, x.tok.chars = key, tp.Chars
	}
	x.estimate(rate)
}

// estimate sets what the request reserves of each bucket at rate (the
// tokens a prompt character costs, margin included; 0: CharsPerToken),
// where the caller gave no cost.
func (x *exchange) estimate(rate float64) {
	tp, costs := x.tok.price, x.tok.costs
	x.tok.rate = rate
	units := tp.Estimate(rate)
	if n, ok := costs.pacing(tp.Meter); ok {
		units = n
	}
	x.class.Units = int(units)
	for i, d := range tp.Draws {
		n, ok := costs[d.Meter]
		if !ok {
			n = d.Estimate(tp, rate)
		}
		x.tok.draws[i].units = n
	}
}

// reestimate prices a waiting request again when answers taught its shape
// more since it was priced (a request of the first answers' time may wait
// long, its estimate made before any taught): it reports whether the
// estimate changed.
func (x *exchange) reestimate() bool {
	if x.tok.key == "" {
		return false
	}
	rate := x.t.tokens.rate(x.tok.key, x.tok.chars)
	if rate == x.tok.rate {
		return false
	}
	x.estimate(rate)
	return true
}

// repriceTokens prices in tokens a request that was counted in requests
// when it was classified, if its host has since answered in OpenAI's
// tokens headers (a batch's requests are classified before the first
// answer comes): it reports whether the request is now priced.
func (x *exchange) repriceTokens() bool {
	if x.class.Meter != "" || x.tok.openAI || !x.l.speaksOpenAI.Load() || x.class.Resource == provider.ResourceGraphQL {
		return false
	}
	x.tok.openAI = true // tried once
	x.priceTokens()
	return x.class.Meter != ""
}

// drawsOf are the buckets of slot's owner the request draws from beside
// its meter.
func (x *exchange) drawsOf(s Slot) []Draw {
	if len(x.tok.draws) == 0 {
		return nil
	}
	out := make([]Draw, len(x.tok.draws))
	for i, d := range x.tok.draws {
		out[i] = Draw{Bucket: BucketID{Provider: s.Bucket.Provider, Owner: s.Bucket.Owner, Resource: d.meter}, Units: d.units}
	}
	return out
}

// readTokens reads what the answer to a request priced in tokens says of
// each bucket it drew from, and returns the reading its meter's bucket is
// settled with. A refusal pauses the one bucket it names: a draw's (the
// other buckets, meter included, take their own counts from the answer),
// or the meter's when it names the meter, none, or a limit the request
// did not draw from (see otherLimit). x.reading stays the answer's, so the
// refusal is still waited out and retried.
func (x *exchange) readTokens(s *sent) *headers.Reading {
	meter, now := x.class.Meter, s.now
	named := ""
	if x.reading.Limited != headers.NotLimited {
		named = x.reading.Resource
	}
	drawn := false
	x.tok.reads = x.tok.reads[:0]
	skew := x.l.skewNow()
	for _, d := range x.grant.slot.Draws {
		r := quota.ReadFor(s.resp.StatusCode, s.resp.Header, s.prefix, now, skew, d.Bucket.Resource)
		if named == d.Bucket.Resource && r.Limited == headers.Primary {
			drawn = true
		} else if r.Limited != headers.NotLimited {
			r = ownCounts(s, now, skew, d.Bucket.Resource)
		}
		x.tok.reads = append(x.tok.reads, r)
	}
	if drawn {
		x.tok.own = ownCounts(s, now, skew, meter)
		return &x.tok.own
	}
	otherLimit(&x.reading, meter, now)
	return &x.reading
}

// ownCounts is what an answer's headers say of bucket alone, as if the
// answer were no refusal: the counts of a bucket another limit's refusal
// did not pause.
func ownCounts(s *sent, now time.Time, skew time.Duration, bucket string) headers.Reading {
	r := quota.ReadFor(http.StatusOK, s.resp.Header, nil, now, skew, bucket)
	r.Status, r.RetryAfter, r.HasRetryAfter = s.resp.StatusCode, 0, false
	if r.Resource != bucket {
		// The answer states nothing of it.
		r.Limit, r.Remaining, r.Used, r.Reset, r.Window = headers.UnknownCount, headers.UnknownCount, headers.UnknownCount, time.Time{}, 0
		r.Resource = bucket
	}
	return r
}

// settleDraws ends the reservation of each bucket the grant drew from
// beside its meter, with what the answer said of it (readTokens); sent
// false releases them unused.
func (x *exchange) settleDraws(sent bool, now time.Time, counted bool) {
	t, g := x.t, &x.grant
	for i, d := range g.slot.Draws {
		p := SettleParams{Slot: Slot{Bucket: d.Bucket}, Lease: g.lease, Now: now}
		if sent && i < len(x.tok.reads) {
			p.Answer = x.l.answer(&x.tok.reads[i], counted, g.sent, t.opts.Rand())
			p.Answer.Continuous = true
			if i < len(x.tok.drawUnits) {
				p.Answer.Units = x.tok.drawUnits[i]
			}
		}
		if err := t.state.Settle(context.WithoutCancel(x.ctx), &p); err != nil {
			t.log.Warn("quota state update failed; the reservation lapses with its lease", "bucket", d.Bucket.String(), "err", err)
		}
	}
	x.tok.reads, x.tok.drawUnits = x.tok.reads[:0], x.tok.drawUnits[:0]
}

// noteOpenAIHeaders marks a lane whose API prices nothing in tokens (a
// host no provider names) as OpenAI-compatible once an answer carries
// OpenAI's tokens headers: its chat requests are then priced like
// OpenAI's (see provider.Provider.PriceOpenAITokens).
func (l *lane) noteOpenAIHeaders(h http.Header) {
	if l.p.Kind != provider.Generic || l.speaksOpenAI.Load() {
		return
	}
	if h.Get("X-Ratelimit-Remaining-Tokens") != "" || h.Get("X-Ratelimit-Limit-Tokens") != "" {
		l.speaksOpenAI.Store(true)
	}
}

// teachTokens makes a successful answer's body, once read to its end,
// teach the prompt's real cost (see usageReader).
func (x *exchange) teachTokens(resp *http.Response) {
	key, chars, costs := x.tok.key, x.tok.chars, &x.t.tokens
	if key == "" || resp.StatusCode != http.StatusOK || resp.Body == nil || resp.Body == http.NoBody {
		return
	}
	resp.Body = &usageReader{rc: resp.Body, done: func(prompt int64) { costs.learn(key, chars, prompt) }}
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
