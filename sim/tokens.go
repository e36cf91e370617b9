package sim

import (
	"encoding/json"
	"io"
	"math"
	"net/http"
	"strings"
	"time"
)

// llmDialect is a language-model API: a request draws from several
// continuous buckets at once (requests, and tokens of one or two kinds),
// priced from its body, and the answer tells what it really used.
type llmDialect interface {
	dialect
	// costs is what a request asking ask takes from each of the API's
	// buckets when it is admitted, in the spec's resource order.
	costs(ask llmAsk) []int64
	// refused answers a request that bucket res cannot pay for: it would
	// have enough after wait (never, when wait < 0). need is the cost.
	refused(c *call, res int, need int64, st bucketState, wait time.Duration) *rendered
	// completion answers an admitted request whose answer is out tokens.
	completion(c *call, ask llmAsk, out int64) *rendered
	// tokenHeaders sets the rate-limit headers of every bucket's state
	// as of at (server clock).
	tokenHeaders(h http.Header, at time.Time, states []bucketState)
	// check answers a request the API turns away before pricing it
	// (Anthropic's missing anthropic-version), nil for none.
	check(c *call) *rendered
	// overloaded is the answer of a server that did not process the
	// request.
	overloaded() *rendered
	// invalid is a 400 answer saying what is wrong with the request.
	invalid(msg string) *rendered
	// outputBucket is the bucket charged max_tokens at admission and
	// given back what the answer did not use when it ends; -1 for none.
	outputBucket() int
}

// llmAsk is what a request asks a language model for.
type llmAsk struct {
	kind      string // "chat", "embeddings" or "models"
	model     string
	prompt    int64 // tokens of the prompt, by the simulator's tokenizer
	maxTokens int64 // the most the answer may have
}

// defaultMaxTokens is what a chat request without max_tokens is charged
// for its answer (OpenAI charges what the model may write).
const defaultMaxTokens = 4096

// readAsk reads the body of an LLM request; needMax makes a missing
// max_tokens an error (Anthropic), else it is defaultMaxTokens.
func (a *api) readAsk(c *call, ld llmDialect, needMax bool) (llmAsk, *rendered) {
	ask := llmAsk{kind: c.ep.variant}
	if ask.kind == "models" {
		return ask, nil
	}
	body, err := io.ReadAll(io.LimitReader(c.r.Body, 4<<20))
	if err != nil {
		return ask, ld.invalid("could not read the request body")
	}
	var req llmRequest
	if err := json.Unmarshal(body, &req); err != nil {
		return ask, ld.invalid("the request body is not valid JSON")
	}
	if req.Model == "" {
		return ask, ld.invalid("model: field required")
	}
	ask.model = req.Model
	tk := a.tokenizer(req.Model)
	if ask.kind == "embeddings" {
		ask.prompt = max(tk.content(req.Input), 1)
		return ask, nil
	}
	if len(req.Messages) == 0 {
		return ask, ld.invalid("messages: field required")
	}
	ask.prompt = tk.prompt(req.System, req.Messages)
	switch {
	case req.MaxCompletionTokens != nil:
		ask.maxTokens = *req.MaxCompletionTokens
	case req.MaxTokens != nil:
		ask.maxTokens = *req.MaxTokens
	case needMax:
		return ask, ld.invalid("max_tokens: field required")
	default:
		ask.maxTokens = defaultMaxTokens
	}
	if ask.maxTokens < 1 {
		return ask, ld.invalid("max_tokens: must be at least 1")
	}
	return ask, nil
}

// outputTokens is how long the answer to the n-th request is: OutputRatio
// of max_tokens on average, between half and one and a half times that,
// at least 1 and at most max_tokens.
func (a *api) outputTokens(ask llmAsk, n uint64) int64 {
	if ask.kind != "chat" {
		return 0
	}
	x := splitmix64(a.seed ^ (n * 0xd1b54a32d192ed03))
	u := 0.5 + float64(x>>11)/(1<<53)
	out := int64(math.Round(float64(ask.maxTokens) * a.outputRatio * u))
	return min(max(out, 1), ask.maxTokens)
}

// answerText is an answer of out tokens.
func answerText(out int64) string {
	const word = "tok "
	return strings.TrimSuffix(strings.Repeat(word, int(out)), " ")
}

// answerTokens answers a request to a language-model API: it prices the
// request from its body, admits it only if every bucket can pay (charging
// them all, or none), and replies after the latency. The output bucket,
// charged max_tokens, gets back what the answer did not use when the
// answer ends, before its headers are written.
func (a *api) answerTokens(c *call, ld llmDialect, inFlight int64, delay time.Duration) {
	if c.ep.variant == "" {
		a.reply(c, ld.invalid("unknown path "+c.rel), bucketState{}, false, delay)
		return
	}
	bad := ld.check(c)
	var ask llmAsk
	if bad == nil {
		ask, bad = a.readAsk(c, ld, ld.outputBucket() >= 0)
	}
	if bad != nil {
		a.reply(c, bad, bucketState{}, false, delay)
		return
	}
	costs := ld.costs(ask)
	states, res, wait := takeTokens(c.own.buckets, c.now, c.realNow, inFlight, costs)
	if res >= 0 {
		a.replyTokens(c, ld, ld.refused(c, res, costs[res], states[res], wait), states, delay, nil)
		return
	}
	out := a.outputTokens(ask, c.requestID())
	rd := ld.completion(c, ask, out)
	var ended func(time.Time)
	if ob := ld.outputBucket(); ob >= 0 && costs[ob] > out {
		ended = func(now time.Time) { c.own.buckets[ob].giveBack(now, costs[ob]-out) }
	}
	a.replyTokens(c, ld, rd, nil, delay, ended)
}

// replyTokens waits out the latency, runs ended (the answer is complete),
// then writes rd with the buckets' states: states when given (a refusal
// reports them as it decided), else as they stand when the answer leaves.
func (a *api) replyTokens(c *call, ld llmDialect, rd *rendered, states []bucketState, delay time.Duration, ended func(time.Time)) {
	if d := a.latency + delay; d > 0 {
		t := time.NewTimer(d)
		select {
		case <-t.C:
		case <-c.r.Context().Done():
			t.Stop()
			if ended != nil {
				ended(time.Now().Add(a.skew))
			}
			return
		}
	}
	now := time.Now().Add(a.skew)
	if ended != nil {
		ended(now)
	}
	at := c.now
	if states == nil {
		at = now
		for _, b := range c.own.buckets {
			states = append(states, b.peekLevel(now))
		}
	}
	h := c.w.Header()
	h["Date"] = a.dateHeader(now)
	ld.headers(c, h)
	if a.rateHeaders {
		ld.tokenHeaders(h, at, states)
	}
	for _, kv := range rd.header {
		h[kv[0]] = []string{kv[1]}
	}
	h["Content-Type"] = []string{rd.contentType}
	h["Content-Length"] = []string{rd.length}
	c.w.WriteHeader(rd.status)
	if c.r.Method != http.MethodHead {
		_, _ = c.w.Write(rd.body)
	}
}

// takeTokens admits a request costing costs[i] from bucket bs[i] at server
// time now, all or nothing. When a bucket cannot pay, res is the one that
// would make the request wait longest (the one a refusal names) and wait
// how long until it can (-1: never, the cost is above its limit); nothing
// is charged. states are every bucket's after the decision.
func takeTokens(bs []*bucket, now, realNow time.Time, inFlight int64, costs []int64) (states []bucketState, res int, wait time.Duration) {
	for _, b := range bs {
		b.mu.Lock()
	}
	defer func() {
		for _, b := range bs {
			b.mu.Unlock()
		}
	}()
	res = -1
	for i, b := range bs {
		if costs[i] == 0 && i > 0 {
			continue
		}
		b.refill(now)
		b.requests++
		b.maxInFlight = max(b.maxInFlight, inFlight)
		if b.scope.early(now) {
			b.earlyRetries++
		}
		if b.limit == 0 || b.level >= float64(costs[i]) {
			continue
		}
		w := time.Duration(-1)
		if costs[i] <= b.limit {
			// Whole milliseconds, rounded up: a request that waits
			// what the refusal says finds enough.
			need := (float64(costs[i]) - b.level) * float64(b.window) / float64(b.limit)
			w = time.Duration(math.Ceil(need*1000)) * time.Millisecond
		}
		if res < 0 || wait >= 0 && (w < 0 || w > wait) {
			res, wait = i, w
		}
	}
	if res >= 0 {
		b := bs[res]
		b.primaryViolations++
		if wait >= 0 {
			b.scope.refuse(now, now.Add(wait))
		}
	} else {
		for i, b := range bs {
			if costs[i] == 0 && i > 0 {
				continue
			}
			b.level -= float64(costs[i])
			b.accepted++
			b.charged += costs[i]
			b.tick(realNow)
		}
	}
	for _, b := range bs {
		states = append(states, b.levelState(now))
	}
	return states, res, wait
}

// refill brings a continuous bucket's level to now. Must hold b.mu.
func (b *bucket) refill(now time.Time) {
	if !b.active {
		b.active, b.level, b.refilled = true, float64(b.limit), now
		return
	}
	if d := now.Sub(b.refilled); d > 0 {
		b.level = min(float64(b.limit), b.level+float64(b.limit)*d.Seconds()/float64(b.window))
		b.refilled = now
	}
}

// levelState reports a continuous bucket as of now without changing it:
// remaining is the whole units it holds, and reset when it is full again.
// Must hold b.mu.
func (b *bucket) levelState(now time.Time) bucketState {
	st := bucketState{limit: b.limit, window: b.window, remaining: b.limit}
	if b.active && b.limit > 0 {
		level := b.level
		if d := now.Sub(b.refilled); d > 0 {
			level = min(float64(b.limit), level+float64(b.limit)*d.Seconds()/float64(b.window))
		}
		st.remaining = max(int64(math.Floor(level)), 0)
		st.full = time.Duration(math.Ceil((float64(b.limit)-level)*float64(b.window)/float64(b.limit)*1000)) * time.Millisecond
	}
	st.used = b.limit - st.remaining
	st.reset = now.Add(st.full + time.Second - 1).Unix()
	return st
}

// peekLevel is levelState under the bucket's lock.
func (b *bucket) peekLevel(now time.Time) bucketState {
	b.mu.Lock()
	defer b.mu.Unlock()
	return b.levelState(now)
}

// giveBack returns n units an answer did not use (max_tokens beyond its
// real output) to a continuous bucket at now.
func (b *bucket) giveBack(now time.Time, n int64) {
	b.mu.Lock()
	defer b.mu.Unlock()
	b.refill(now)
	b.level = min(float64(b.limit), b.level+float64(n))
	b.charged -= n
}

// llmRoute finds the endpoint of a language-model API whose chat
// endpoint is chat; any other path routes to nothing (no variant).
func llmRoute(c *call, chat string) endpoint {
	s, post := c.segs, c.r.Method == http.MethodPost
	if len(s) > 0 && s[0] == "v1" {
		s = s[1:]
	}
	p := strings.Join(s, "/")
	switch {
	case p == chat && post:
		return endpoint{variant: "chat", write: true}
	case p == "embeddings" && post && chat == "chat/completions":
		return endpoint{variant: "embeddings", write: true}
	case p == "models" && !post:
		return endpoint{variant: "models"}
	}
	return endpoint{}
}

// modelsBody lists the models a simulated API knows.
func modelsBody(names ...string) []map[string]any {
	var out []map[string]any
	for _, n := range names {
		out = append(out, map[string]any{"id": n})
	}
	return out
}
