package batch_test

import (
	"context"
	"errors"
	"fmt"
	"io"
	"net/http"
	"strings"
	"sync"
	"testing"
	"testing/synctest"
	"time"

	"github.com/ratekeeper/ratekeeper/batch"
	"github.com/ratekeeper/ratekeeper/sim"
	"github.com/ratekeeper/ratekeeper/transport"
)

// Do sends through a running batch and hands the answer over with its
// body open; a request whose quota returns beyond its MaxWait gets the
// transport's WaitError, nothing sent; without MaxWait it waits in the
// batch for its quota (fake time).
func TestDoWaitsUpToMaxWait(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		api := newSimAPI(t, sim.APIConfig{Dialect: "github", Limit: 2, Window: 10 * time.Second,
			Tokens: []sim.TokenConfig{{Token: "tok-do-1", Owner: "alice"}}}, "tok-do-1")
		b := batch.New(api.t, batch.Options{InFlight: 2, KeepRunning: true})
		ctx, stop := context.WithCancel(context.Background())
		ran := make(chan error, 1)
		go func() { ran <- b.Run(ctx) }()
		for i := range 2 {
			resp, err := b.Do(get(t, fmt.Sprintf("%s/repos/o/r%d", api.base, i)), batch.MaxWait(time.Second))
			if err != nil {
				t.Fatal(err)
			}
			if body, err := io.ReadAll(resp.Body); err != nil || resp.StatusCode != http.StatusOK || len(body) == 0 {
				t.Fatalf("request %d: %d, %d bytes, %v", i, resp.StatusCode, len(body), err)
			}
			resp.Body.Close()
		}
		start := time.Now()
		_, err := b.Do(get(t, api.base+"/repos/o/r2"), batch.MaxWait(time.Second))
		var we *transport.WaitError
		if !errors.As(err, &we) || time.Since(start) != 0 {
			t.Fatalf("third request: %v after %v; want a WaitError at once", err, time.Since(start))
		}
		resp, err := b.Do(get(t, api.base+"/repos/o/r3"))
		if err != nil || resp.StatusCode != http.StatusOK {
			t.Fatalf("fourth request: %v", err)
		}
		resp.Body.Close()
		if time.Since(start) < 5*time.Second {
			t.Errorf("fourth request answered after %v; want it to wait for the next window", time.Since(start))
		}
		stop()
		if err := <-ran; !errors.Is(err, context.Canceled) {
			t.Errorf("Run: %v", err)
		}
	})
}

// Requests given an Order go by it within their priority, before those
// added without one, whatever the order they came in.
func TestOrderOption(t *testing.T) {
	var mu sync.Mutex
	var got []string
	rt := roundTripFunc(func(r *http.Request) (*http.Response, error) {
		mu.Lock()
		got = append(got, r.URL.Path)
		mu.Unlock()
		return &http.Response{StatusCode: 200, Body: http.NoBody, Request: r}, nil
	})
	b := batch.New(rt, batch.Options{InFlight: 1})
	for _, c := range []struct {
		path string
		opts []batch.Option
	}{
		{"/plain", nil}, {"/o3", []batch.Option{batch.Order(3)}}, {"/o1", []batch.Option{batch.Order(1)}},
		{"/high", []batch.Option{batch.Priority(1), batch.Order(9)}}, {"/o2", []batch.Option{batch.Order(2)}},
	} {
		if err := b.Add(get(t, "http://example.test"+c.path), c.opts...); err != nil {
			t.Fatal(err)
		}
	}
	if err := b.Run(context.Background()); err != nil {
		t.Fatal(err)
	}
	if want := "[/high /o1 /o2 /o3 /plain]"; fmt.Sprint(got) != want {
		t.Errorf("sent %v, want %s", got, want)
	}
}

type roundTripFunc func(*http.Request) (*http.Response, error)

func (f roundTripFunc) RoundTrip(r *http.Request) (*http.Response, error) { return f(r) }

// A silent scope may hold MaxScopeWaiting requests waiting in the batch:
// the next one that would wait for it gets the WaitError at once, while
// a request of no scope waits as before (fake time).
func TestMaxScopeWaiting(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		opened := time.Now().Add(10 * time.Second)
		var sent sync.Map
		rt := roundTripFunc(func(r *http.Request) (*http.Response, error) {
			if time.Now().Before(opened) {
				scope := ""
				if strings.HasPrefix(r.URL.Path, "/users/") {
					scope = "users"
				}
				return nil, &transport.WaitError{Provider: "p", Resource: "core", Scope: scope, Until: opened, Wait: time.Until(opened)}
			}
			sent.Store(r.URL.Path, true)
			return &http.Response{StatusCode: 200, Body: http.NoBody, Request: r}, nil
		})
		b := batch.New(rt, batch.Options{InFlight: 2, KeepRunning: true, MaxScopeWaiting: 1})
		ctx, stop := context.WithCancel(context.Background())
		defer stop()
		go func() { _ = b.Run(ctx) }()
		errs := map[string]error{}
		var mu sync.Mutex
		var wg sync.WaitGroup
		for i, path := range []string{"/users/1", "/users/2", "/projects/1", "/projects/2"} {
			wg.Go(func() {
				time.Sleep(time.Duration(i) * time.Millisecond) // in this order
				resp, err := b.Do(get(t, "http://example.test"+path), batch.MaxWait(time.Minute))
				if resp != nil {
					resp.Body.Close()
				}
				mu.Lock()
				errs[path] = err
				mu.Unlock()
			})
		}
		wg.Wait()
		var we *transport.WaitError
		if !errors.As(errs["/users/2"], &we) {
			t.Errorf("/users/2: %v; want the WaitError, one users request waiting already", errs["/users/2"])
		}
		for _, p := range []string{"/users/1", "/projects/1", "/projects/2"} {
			if _, ok := sent.Load(p); errs[p] != nil || !ok {
				t.Errorf("%s: %v; want it sent once its quota returned", p, errs[p])
			}
		}
	})
}

// A request given StopWaiting ends, unsent, when its context ends while
// it waits for quota — a Do at once, one of Add through OnResult from a
// worker — while a request already at the server ends with its answer
// (fake time).
func TestStopWaitingEndsOnlyWhatWaits(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		opened := time.Now().Add(time.Hour)
		release := make(chan struct{})
		var mu sync.Mutex
		sent := map[string]int{}
		rt := roundTripFunc(func(r *http.Request) (*http.Response, error) {
			if r.URL.Path == "/slow" {
				mu.Lock()
				sent[r.URL.Path]++
				mu.Unlock()
				<-release // at the server when the stop comes
				return &http.Response{StatusCode: 200, Body: http.NoBody, Request: r}, nil
			}
			if time.Now().Before(opened) {
				return nil, &transport.WaitError{Provider: "p", Resource: "core", Until: opened, Wait: time.Until(opened)}
			}
			mu.Lock()
			sent[r.URL.Path]++
			mu.Unlock()
			return &http.Response{StatusCode: 200, Body: http.NoBody, Request: r}, nil
		})
		var added []batch.Result
		b := batch.New(rt, batch.Options{InFlight: 2, KeepRunning: true, OnResult: func(r batch.Result) {
			mu.Lock()
			added = append(added, r)
			mu.Unlock()
		}})
		runCtx, stopRun := context.WithCancel(context.Background())
		defer stopRun()
		go func() { _ = b.Run(runCtx) }()
		stopping, stop := context.WithCancel(context.Background())
		results := make(map[string]error)
		var wg sync.WaitGroup
		for _, path := range []string{"/slow", "/waits"} {
			wg.Go(func() {
				resp, err := b.Do(get(t, "http://example.test"+path), batch.StopWaiting(stopping))
				if resp != nil {
					resp.Body.Close()
				}
				mu.Lock()
				results[path] = err
				mu.Unlock()
			})
		}
		if err := b.Add(get(t, "http://example.test/added"), batch.StopWaiting(stopping)); err != nil {
			t.Fatal(err)
		}
		synctest.Wait() // /slow at the server, the others parked for an hour
		start := time.Now()
		stop()
		synctest.Wait()
		mu.Lock()
		if err := results["/waits"]; !errors.Is(err, batch.ErrStoppedWaiting) {
			t.Errorf("/waits: %v; want ErrStoppedWaiting at once", err)
		}
		if len(added) != 1 || !errors.Is(added[0].Err, batch.ErrStoppedWaiting) {
			t.Errorf("/added: %v; want one result, ErrStoppedWaiting", added)
		}
		if _, done := results["/slow"]; done {
			t.Errorf("/slow ended (%v) while at the server; want it to end with its answer", results["/slow"])
		}
		mu.Unlock()
		close(release)
		wg.Wait()
		if err := results["/slow"]; err != nil {
			t.Errorf("/slow: %v; want its answer", err)
		}
		if time.Since(start) != 0 {
			t.Errorf("the stop took %v; want nothing waited for", time.Since(start))
		}
		if sent["/waits"]+sent["/added"] != 0 || sent["/slow"] != 1 {
			t.Errorf("sent %v; want /slow once, nothing else", sent)
		}
	})
}
