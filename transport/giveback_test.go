package transport

import (
	"context"
	"errors"
	"io"
	"net/http"
	"strings"
	"testing"
	"time"

	"github.com/ratekeeper/ratekeeper/sim"
)

// panicRT panics on the requests it is told to.
type panicRT struct {
	next  http.RoundTripper
	panic func(*http.Request) bool
}

func (p panicRT) RoundTrip(req *http.Request) (*http.Response, error) {
	if p.panic(req) {
		panic("base transport broke")
	}
	return p.next.RoundTrip(req)
}

// leasesHeld counts the reservations the state still holds, in owners and
// buckets.
func leasesHeld(t *testing.T, tr *Transport, now time.Time) (owners, buckets int64) {
	t.Helper()
	os, err := tr.state.Owners(context.Background())
	if err != nil {
		t.Fatal(err)
	}
	for _, o := range os {
		owners += o.InFlight(now)
	}
	bs, err := tr.state.Buckets(context.Background())
	if err != nil {
		t.Fatal(err)
	}
	for _, b := range bs {
		buckets += b.InFlight(now)
	}
	return owners, buckets
}

// A panic between reserving and settling gives the reservation and the
// concurrency slot back: nothing stays held for the lease.
func TestPanicGivesBackTheReservation(t *testing.T) {
	srv, err := sim.New(sim.Config{APIs: []sim.APIConfig{{Dialect: "github", Tokens: []sim.TokenConfig{{Token: "tok-test-0001", Owner: "a"}}}}})
	if err != nil {
		t.Fatal(err)
	}
	tr := handlerTransport(t, srv, func(o *Options) {
		o.SkipValidation = true
		o.Base = panicRT{next: handlerRT{srv}, panic: func(r *http.Request) bool { return strings.Contains(r.URL.Path, "boom") }}
	})
	get := func(path string) (err error) {
		defer func() {
			if r := recover(); r != nil {
				err = errors.New("panicked")
			}
		}()
		req, _ := http.NewRequest(http.MethodGet, "http://api.test"+path, nil)
		resp, err := tr.RoundTrip(req)
		if err == nil {
			io.Copy(io.Discard, resp.Body)
			resp.Body.Close()
		}
		return err
	}
	if err := get("/repos/o/r"); err != nil {
		t.Fatal(err)
	}
	for range 30 {
		if err := get("/repos/o/boom"); err == nil || err.Error() != "panicked" {
			t.Fatalf("want a panic, got %v", err)
		}
	}
	if o, b := leasesHeld(t, tr, time.Now()); o != 0 || b != 0 {
		t.Fatalf("after panics: %d owner and %d bucket reservations held, want none", o, b)
	}
	// The concurrency cap (20 for GitHub) is not eaten by the panics.
	if err := get("/repos/o/r2"); err != nil {
		t.Fatal(err)
	}
}

// cutRT answers the first n requests with a body that breaks off half way.
type cutRT struct {
	next http.RoundTripper
	n    *int
}

type cutBody struct {
	io.Reader
	c io.Closer
}

func (b cutBody) Close() error { return b.c.Close() }

func (c cutRT) RoundTrip(req *http.Request) (*http.Response, error) {
	resp, err := c.next.RoundTrip(req)
	if err != nil || *c.n == 0 {
		return resp, err
	}
	*c.n--
	resp.Body = cutBody{Reader: io.MultiReader(io.LimitReader(resp.Body, 5), errReader{io.ErrUnexpectedEOF}), c: resp.Body}
	return resp, nil
}

// A body that breaks off while the transport's cache reads it is a network
// failure like any other: an idempotent GET goes again, and the broken
// answer's charge is recorded.
func TestBodyCutShortWhileCachingIsRetried(t *testing.T) {
	srv, err := sim.New(sim.Config{APIs: []sim.APIConfig{{Dialect: "github", Tokens: []sim.TokenConfig{{Token: "tok-test-0001", Owner: "a"}}}}})
	if err != nil {
		t.Fatal(err)
	}
	cuts := 1
	tr := handlerTransport(t, srv, func(o *Options) {
		o.SkipValidation = true
		o.Base = cutRT{next: handlerRT{srv}, n: &cuts}
		o.RetryBase = time.Millisecond
	})
	req, _ := http.NewRequest(http.MethodGet, "http://api.test/repos/o/r", nil)
	resp, err := tr.RoundTrip(req)
	if err != nil {
		t.Fatalf("a GET whose body broke off once: %v", err)
	}
	body, _ := io.ReadAll(resp.Body)
	resp.Body.Close()
	if resp.StatusCode != 200 || len(body) < 10 || resp.Header.Get(HeaderAttempts) != "2" {
		t.Fatalf("status %d, %d bytes, attempts %q; want the whole answer on the second attempt", resp.StatusCode, len(body), resp.Header.Get(HeaderAttempts))
	}
	bs, _ := tr.state.Buckets(context.Background())
	for id, b := range bs {
		if id.Resource == "core" && b.Remaining != 4998 {
			t.Fatalf("core remaining %d, want 4998: both answers charged", b.Remaining)
		}
	}
}

type idleCounter struct {
	http.RoundTripper
	closed int
}

func (c *idleCounter) CloseIdleConnections() { c.closed++ }

// An *http.Client over the transport can drop the base transport's idle
// connections.
func TestCloseIdleConnectionsReachesTheBase(t *testing.T) {
	base := &idleCounter{RoundTripper: http.DefaultTransport}
	tr := handlerTransport(t, http.NotFoundHandler(), func(o *Options) { o.Base = base })
	(&http.Client{Transport: tr}).CloseIdleConnections()
	if base.closed != 1 {
		t.Fatalf("base closed idle connections %d times, want 1", base.closed)
	}
}
