package gateway

import (
	"bytes"
	"context"
	"crypto/sha256"
	"io"
	"net/http"
	"slices"
	"strconv"
	"strings"
	"sync"
)

// HeaderCoalesced marks a response that was another identical request's
// upstream answer, shared: its value is "shared".
const HeaderCoalesced = "X-Ratekeeper-Coalesced"

// flightKey identifies requests that would get the same answer.
type flightKey [sha256.Size]byte

// ignoredForCoalescing are request fields that do not change an API's
// answer: who the client program is and tracing. Every other field that
// reaches the upstream (Accept, Accept-Encoding, If-None-Match, Range,
// X-GitHub-Api-Version, …) is part of the key, so two requests are only
// coalesced when the upstream could not tell them apart. Credential headers
// are not here: in pass-through mode the identity stands for them, and
// otherwise they are removed before the key is made.
var ignoredForCoalescing = map[string]bool{
	"User-Agent":       true,
	"Traceparent":      true,
	"Tracestate":       true,
	"Baggage":          true,
	"X-Request-Id":     true,
	"X-Correlation-Id": true,
	"X-Amzn-Trace-Id":  true,
	"X-B3-Traceid":     true,
	"X-B3-Spanid":      true,
	"X-B3-Sampled":     true,
}

// coalesceKey is the key of a GET for provider name, sent with the given
// identity ("" for the gateway's own credentials, a digest of the client's
// token with pass-through) to the upstream URL u with header h.
func coalesceKey(name, identity, u string, h http.Header) flightKey {
	hs := sha256.New()
	write := func(s string) {
		hs.Write([]byte(strconv.Itoa(len(s))))
		hs.Write([]byte{':'})
		hs.Write([]byte(s))
	}
	write(name)
	write(identity)
	write(u)
	names := make([]string, 0, len(h))
	for k := range h {
		if !ignoredForCoalescing[k] {
			names = append(names, k)
		}
	}
	slices.Sort(names)
	for _, k := range names {
		write(k)
		write(strings.Join(h[k], "\x00"))
	}
	var key flightKey
	hs.Sum(key[:0])
	return key
}

// flightGroup makes identical concurrent GETs share one upstream request.
// The first request of a key (the leader) sends; the others (followers)
// wait for its answer. When followers joined before the answer's header
// came, a body of at most limit bytes is read into memory and every
// participant gets its own copy; otherwise — nobody else asked, the body is
// larger, or it is an event stream — the answer streams to the leader
// alone, and the followers, if any, send their own requests (through the
// cache, usually a free conditional request). The upstream request runs as
// long as any participant still wants it: a leader whose client leaves
// does not cancel its followers' answer.
type flightGroup struct {
	limit int64

	mu      sync.Mutex
	flights map[flightKey]*flight
}

type flight struct {
	done      chan struct{}
	cancel    context.CancelFunc
	waiters   int  // participants that still want the answer; guarded by the group's mu
	followers int  // participants that joined the leader; guarded by the group's mu
	over      bool // the answer is published; guarded by the group's mu

	// Set before done is closed.
	shared *sharedResponse
	err    error
	tooBig bool
}

// sharedResponse is an upstream answer read whole, copied out to each
// participant.
type sharedResponse struct {
	status     int
	statusText string
	proto      string
	major      int
	minor      int
	header     http.Header
	body       []byte
}

func newFlightGroup(limit int64) *flightGroup {
	return &flightGroup{limit: limit, flights: map[flightKey]*flight{}}
}

// do sends req with send, unless an identical request (same key) is
// already in flight, in which case it waits for that one's answer. shared
// reports that the answer came from another request.
func (g *flightGroup) do(req *http.Request, key flightKey, send func(*http.Request) (*http.Response, error)) (resp *http.Response, shared bool, err error) {
	ctx := req.Context()
	g.mu.Lock()
	if f, ok := g.flights[key]; ok {
		f.waiters++
		f.followers++
		g.mu.Unlock()
		select {
		case <-f.done:
		case <-ctx.Done():
			g.leave(key, f)
			return nil, false, ctx.Err()
		}
		switch {
		case f.err != nil:
			return nil, true, f.err
		case f.tooBig:
			resp, err := send(req)
			return resp, false, err
		}
		return f.shared.response(req), true, nil
	}
	fctx, cancel := context.WithCancel(context.WithoutCancel(ctx))
	f := &flight{done: make(chan struct{}), cancel: cancel, waiters: 1}
	g.flights[key] = f
	g.mu.Unlock()

	stop := context.AfterFunc(ctx, func() { g.leave(key, f) })
	resp, err = send(req.WithContext(fctx))
	if err != nil {
		g.publish(key, f, nil, false, err)
		stop()
		cancel()
		return nil, false, err
	}
	if g.alone(key, f) || resp.ContentLength > g.limit || isEventStream(resp.Header) {
		// Nobody else asked before the answer came (the usual case:
		// from now on newcomers send their own request), or the answer
		// is known to be too large, or a stream meant to be read as it
		// comes: it goes to the leader as it arrives.
		g.publish(key, f, nil, true, nil)
		stop()
		context.AfterFunc(ctx, cancel) // the leader alone reads it now
		resp.Body = &streamBody{r: resp.Body, body: resp.Body, cancel: cancel}
		return resp, false, nil
	}
	body, complete, rerr := readUpTo(resp.Body, g.limit)
	switch {
	case rerr != nil:
		resp.Body.Close()
		g.publish(key, f, nil, false, rerr)
		stop()
		cancel()
		return nil, false, rerr
	case complete:
		resp.Body.Close()
		sr := newShared(resp, body)
		g.publish(key, f, sr, false, nil)
		stop()
		cancel()
		resp.Body = io.NopCloser(bytes.NewReader(body))
		resp.ContentLength = int64(len(body))
		resp.Header.Set("Content-Length", strconv.Itoa(len(body)))
		return resp, false, nil
	}
	// Too large to hold: the leader streams what was read and the rest;
	// the flight's context lives until the leader closes the body or its
	// client leaves.
	g.publish(key, f, nil, true, nil)
	stop()
	context.AfterFunc(ctx, cancel)
	resp.Body = &streamBody{r: io.MultiReader(bytes.NewReader(body), resp.Body), body: resp.Body, cancel: cancel}
	return resp, false, nil
}

// alone reports whether no other request joined f; if so the flight ends
// now, so that none can join any more.
func (g *flightGroup) alone(key flightKey, f *flight) bool {
	g.mu.Lock()
	defer g.mu.Unlock()
	if f.followers > 0 {
		return false
	}
	f.over = true
	if g.flights[key] == f {
		delete(g.flights, key)
	}
	return true
}

// leave is called when a participant's client is gone: the last one to
// leave before the answer cancels the upstream request, and the key is
// freed so that a newcomer starts afresh instead of joining a cancelled
// flight.
func (g *flightGroup) leave(key flightKey, f *flight) {
	g.mu.Lock()
	f.waiters--
	last := f.waiters == 0 && !f.over
	if last && g.flights[key] == f {
		delete(g.flights, key)
	}
	g.mu.Unlock()
	if last {
		f.cancel()
	}
}

func (g *flightGroup) publish(key flightKey, f *flight, sr *sharedResponse, tooBig bool, err error) {
	g.mu.Lock()
	f.over = true
	if g.flights[key] == f {
		delete(g.flights, key)
	}
	g.mu.Unlock()
	f.shared, f.tooBig, f.err = sr, tooBig, err
	close(f.done)
}

func newShared(resp *http.Response, body []byte) *sharedResponse {
	h := resp.Header.Clone()
	// The body was read whole (and decompressed, if the transport did
	// that), so its length is known.
	h.Set("Content-Length", strconv.Itoa(len(body)))
	return &sharedResponse{
		status: resp.StatusCode, statusText: resp.Status,
		proto: resp.Proto, major: resp.ProtoMajor, minor: resp.ProtoMinor,
		header: h, body: body,
	}
}

// response returns a participant's own copy of the answer.
func (s *sharedResponse) response(req *http.Request) *http.Response {
	return &http.Response{
		Status: s.statusText, StatusCode: s.status,
		Proto: s.proto, ProtoMajor: s.major, ProtoMinor: s.minor,
		Header:        s.header.Clone(),
		Body:          io.NopCloser(bytes.NewReader(s.body)),
		ContentLength: int64(len(s.body)),
		Request:       req,
	}
}

// isEventStream reports a server-sent events answer.
func isEventStream(h http.Header) bool {
	ct := h.Get("Content-Type")
	return strings.HasPrefix(strings.ToLower(strings.TrimSpace(ct)), "text/event-stream")
}

// readUpTo reads r until EOF or until more than limit bytes came; complete
// says EOF came first.
func readUpTo(r io.Reader, limit int64) (b []byte, complete bool, err error) {
	var buf bytes.Buffer
	n, err := io.Copy(&buf, io.LimitReader(r, limit+1))
	if err != nil {
		return nil, false, err
	}
	return buf.Bytes(), n <= limit, nil
}

// streamBody is the leader's body when the answer was too large to share:
// what was read, then the rest; closing it ends the flight's context.
type streamBody struct {
	r      io.Reader
	body   io.Closer
	cancel context.CancelFunc
	once   sync.Once
}

func (s *streamBody) Read(p []byte) (int, error) { return s.r.Read(p) }

func (s *streamBody) Close() error {
	err := s.body.Close()
	s.once.Do(s.cancel)
	return err
}
