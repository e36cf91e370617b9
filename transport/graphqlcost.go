package transport

import (
	"bytes"
	"io"
	"net/http"
	"sync"
	"time"

	"github.com/ratekeeper/ratekeeper/headers"
	"github.com/ratekeeper/ratekeeper/provider"
)

// GitHub's GraphQL API counts points: a query costs what its connections
// need (see provider.ClassifyGraphQL), and x-ratelimit-used counts points.
// A request reserving 1 would overspend the bucket by the cost of every
// query in flight, so a GraphQL query reserves its predicted cost
// (provider.Request.Units, quota.Ask.Units): the cost learnt for its shape
// (its text and formula price, without variables' values) from earlier
// answers, else the cost
// GitHub's published formula gives (the exchange's classify step prices
// the query: exchange.priceQuery). Answers teach the real cost: the
// rateLimit { cost } of the body when the query asks for it, otherwise the
// rise of x-ratelimit-used across an answer whose query was alone in
// flight on its bucket from its send to its answer (in this process). The
// settle then counts the real cost (quota.Answer.Units).

// maxGraphQLBody bounds the GraphQL request and answer bodies read to
// price a query; beyond it, the query reserves as any request and its
// answer streams unread.
const maxGraphQLBody = 1 << 20

// maxShapes bounds the costs remembered; past it they are forgotten and
// learnt again.
const maxShapes = 4096

// graphqlCosts is what the transport knows of GraphQL costs: per query
// shape, and per bucket the trace that tells when a query was alone.
type graphqlCosts struct {
	mu      sync.Mutex
	shapes  map[string]int64
	buckets map[BucketID]*graphqlTrace
}

// graphqlTrace follows one bucket's GraphQL queries in this process.
type graphqlTrace struct {
	inFlight int
	seq      uint64    // sends and answers so far
	used     int64     // the highest x-ratelimit-used of the latest window answered (UnknownCount: none)
	reset    time.Time // and its reset
}

// later reports whether r says more of the bucket than the trace holds: the
// first count, a later window's, or a higher one in the same window (used
// only rises within a window, so an answer overtaken by a later-sent
// query's, or a straggler of the window before, tells less).
func (tr *graphqlTrace) later(r *headers.Reading) bool {
	switch {
	case tr.used == headers.UnknownCount:
		return true
	case absDuration(r.Reset.Sub(tr.reset)) <= 1100*time.Millisecond:
		return r.Used > tr.used
	}
	return r.Reset.After(tr.reset)
}

// graphqlSend is a query's note of its bucket when it went.
type graphqlSend struct {
	traced bool
	alone  bool   // nothing else of this process was in flight on the bucket
	seq    uint64 // the trace's seq after the send
	used   int64
	reset  time.Time
}

// learnt is the cost learnt for the shape key (see learnGraphQL).
func (c *graphqlCosts) learnt(key string) (int64, bool) {
	c.mu.Lock()
	defer c.mu.Unlock()
	n, ok := c.shapes[key]
	return n, ok
}

// sentGraphQL notes that a GraphQL query goes now on bucket id.
func (c *graphqlCosts) sent(id BucketID) graphqlSend {
	c.mu.Lock()
	defer c.mu.Unlock()
	tr := c.trace(id)
	s := graphqlSend{traced: true, alone: tr.inFlight == 0, used: tr.used, reset: tr.reset}
	tr.inFlight++
	tr.seq++
	s.seq = tr.seq
	return s
}

func (c *graphqlCosts) trace(id BucketID) *graphqlTrace {
	if c.buckets == nil {
		c.buckets = map[BucketID]*graphqlTrace{}
	}
	tr := c.buckets[id]
	if tr == nil {
		tr = &graphqlTrace{used: headers.UnknownCount}
		c.buckets[id] = tr
	}
	return tr
}

// answered ends a query noted by sent: it learns the real cost of the
// shape key — stated, when stated > 0, or the rise of used when the query
// was alone — and returns it (0 when not known). r is nil when nothing
// came back.
func (c *graphqlCosts) answered(id BucketID, key string, s graphqlSend, r *headers.Reading, stated int64) int64 {
	if !s.traced {
		return 0
	}
	c.mu.Lock()
	defer c.mu.Unlock()
	tr := c.trace(id)
	tr.inFlight--
	tr.seq++
	if r == nil || r.Limited != headers.NotLimited {
		return 0
	}
	real := stated
	sameWindow := r.HasReset() && !s.reset.IsZero() && absDuration(r.Reset.Sub(s.reset)) <= 1100*time.Millisecond
	if real <= 0 && s.alone && tr.seq == s.seq+1 && s.used != headers.UnknownCount && r.Used != headers.UnknownCount && sameWindow {
		real = r.Used - s.used
	}
	if r.Used != headers.UnknownCount && r.HasReset() && tr.later(r) {
		tr.used, tr.reset = r.Used, r.Reset
	}
	if real <= 0 {
		return 0
	}
	if c.shapes == nil || len(c.shapes) >= maxShapes {
		c.shapes = map[string]int64{}
	}
	c.shapes[key] = real
	return real
}

func absDuration(d time.Duration) time.Duration {
	if d < 0 {
		return -d
	}
	return d
}

// readGraphQLAnswer reads a GraphQL answer's body (at most maxGraphQLBody;
// a longer one is given back unread beyond that) and returns its bytes
// with a body that still yields everything.
func readGraphQLAnswer(body io.ReadCloser) ([]byte, io.ReadCloser) {
	if body == nil || body == http.NoBody {
		return nil, body
	}
	b, err := io.ReadAll(io.LimitReader(body, maxGraphQLBody))
	if err != nil {
		return b, &replayBody{Reader: io.MultiReader(bytes.NewReader(b), errReader{err}), closer: body}
	}
	return b, &replayBody{Reader: io.MultiReader(bytes.NewReader(b), body), closer: body}
}

// learnGraphQL reads a GraphQL answer's body and cost after its send s,
// before its settle: the cost learnt goes into the grant's settle.
func (t *Transport) learnGraphQL(p *provider.Provider, g *grant, s *sent, r *headers.Reading) {
	if !s.gql.traced {
		return
	}
	var stated int64
	if s.resp.StatusCode == http.StatusOK {
		stated, _ = p.StatedCost(s.prefix) // read by read
	}
	g.units = t.costs.answered(g.slot.Bucket, t.stateKey(p)+"\x00"+g.class.Shape, s.gql, r, stated)
	s.gql.traced = false
}
