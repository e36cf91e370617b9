package quota

import (
	"net/http"
	"strconv"
	"testing"
	"time"

	"github.com/ratekeeper/ratekeeper/headers"
)

// githubCore is a GitHub core bucket's reading: remaining of 5,000 left,
// reset at reset.
func githubCore(remaining int64, reset time.Time, now time.Time) *headers.Reading {
	h := http.Header{}
	h.Set("X-Ratelimit-Limit", "5000")
	h.Set("X-Ratelimit-Remaining", strconv.FormatInt(remaining, 10))
	h.Set("X-Ratelimit-Reset", strconv.FormatInt(reset.Unix(), 10))
	h.Set("X-Ratelimit-Resource", "core")
	r := headers.Parse(http.StatusOK, h, nil, now)
	return &r
}

// proxyRefusal is what a proxy or abuse filter in front of GitHub answers:
// a 429 page with no rate-limit header, as headers.Parse reads it.
func proxyRefusal(status int, now time.Time, extra ...string) *headers.Reading {
	h := http.Header{"Content-Type": {"text/html; charset=utf-8"}}
	for i := 0; i+1 < len(extra); i += 2 {
		h.Set(extra[i], extra[i+1])
	}
	r := headers.Parse(status, h, []byte("<html><body><h1>Too Many Requests</h1></body></html>"), now)
	return &r
}

// A headerless 429 at a GitHub bucket with 4,000 left and its reset 50
// minutes away pauses the bucket for GitHub's minute, not until the reset:
// a request goes at 60 s, and the next answer's stated remaining (3,990)
// is the bucket's again. On main the refusal was a primary one: remaining
// 0 until the reset, and the 200 stating 3,990 could not raise it.
func TestBareRefusalPausesAMinuteNotUntilTheReset(t *testing.T) {
	reset := t0.Add(50 * time.Minute)
	b, o := NewBucket(), Owner{}
	a := &Ask{Policy: Policy{Kind: Greedy}}
	Settle(&o, &b, 0, &Answer{Reading: githubCore(4000, reset, t0), Counted: true}, t0)

	l := lz(t0)
	if d := Decide([]Option{{Owner: &o, Bucket: &b}}, a, l, t0); d.Wait != 0 {
		t.Fatalf("first request waits %v", d.Wait)
	}
	at := t0.Add(time.Second)
	r := proxyRefusal(http.StatusTooManyRequests, at)
	if r.Limited != headers.Bare {
		t.Fatalf("the proxy's 429 reads as %v, want bare", r.Limited)
	}
	Settle(&o, &b, l.ID, &Answer{Reading: r, Counted: true, Sent: t0, BareWait: time.Minute}, at)

	if w := Wait(&o, &b, a, at.Add(59*time.Second)); w != time.Second {
		t.Errorf("59 s after the refusal: wait %v, want 1s (nothing before the minute)", w)
	}
	if w := Wait(&o, &b, a, at.Add(time.Minute)); w != 0 {
		t.Errorf("60 s after the refusal: wait %v, want 0 (the reset is 49 minutes away)", w)
	}
	if !o.PenaltyUntil.IsZero() {
		t.Errorf("owner paused until %v: a bare refusal pauses the bucket refused, not every bucket of the owner", o.PenaltyUntil)
	}
	back := at.Add(time.Minute)
	Settle(&o, &b, 0, &Answer{Reading: githubCore(3990, reset, back), Counted: true, Sent: back}, back)
	if b.Remaining != 3990 {
		t.Errorf("after a 200 stating 3990 left: remaining %d, want 3990", b.Remaining)
	}
}

// A bare refusal that repeats pauses exponentially longer: a minute, then
// two (a request sent after the first pause was refused again), then
// four; a refusal of a request already in flight when the pause began does
// not count as a repeat. A success sent after a pause starts again at a
// minute.
func TestBareRefusalBacksOffExponentially(t *testing.T) {
	b := NewBucket()
	Settle(nil, &b, 0, &Answer{Reading: githubCore(4000, t0.Add(time.Hour), t0), Counted: true}, t0)
	refuse := func(sent, at time.Time) time.Duration {
		Settle(nil, &b, 0, &Answer{Reading: proxyRefusal(http.StatusTooManyRequests, at), Sent: sent, BareWait: time.Minute}, at)
		return b.BlockedUntil.Sub(at)
	}
	if d := refuse(t0, t0); d != time.Minute {
		t.Errorf("first pause %v, want 1m", d)
	}
	if d := refuse(t0, t0.Add(time.Second)); d != time.Minute {
		t.Errorf("a refusal of the same episode (sent before the pause) paused %v from its arrival, want 1m", d)
	}
	at := t0.Add(61 * time.Second)
	if d := refuse(at, at); d != 2*time.Minute {
		t.Errorf("second pause %v, want 2m", d)
	}
	at = at.Add(2 * time.Minute)
	if d := refuse(at, at); d != 4*time.Minute {
		t.Errorf("third pause %v, want 4m", d)
	}
	at = at.Add(4 * time.Minute)
	Settle(nil, &b, 0, &Answer{Reading: githubCore(3900, t0.Add(time.Hour), at), Counted: true, Sent: at}, at)
	at = at.Add(time.Second)
	if d := refuse(at, at); d != time.Minute {
		t.Errorf("after a success: pause %v, want 1m again", d)
	}
}

// Elsewhere (no provider pause) a bare refusal pauses for ScopeBackoff,
// doubling; a Retry-After is obeyed exactly, on GitHub too, and nothing
// goes before it.
func TestBareRefusalWaits(t *testing.T) {
	b := NewBucket()
	Settle(nil, &b, 0, &Answer{Reading: proxyRefusal(http.StatusTooManyRequests, t0), Sent: t0}, t0)
	if d := b.BlockedUntil.Sub(t0); d != ScopeBackoff {
		t.Errorf("first pause without a provider's %v, want %v", d, ScopeBackoff)
	}
	at := t0.Add(2 * time.Second)
	Settle(nil, &b, 0, &Answer{Reading: proxyRefusal(http.StatusTooManyRequests, at), Sent: at}, at)
	if d := b.BlockedUntil.Sub(at); d != 2*ScopeBackoff {
		t.Errorf("second pause %v, want %v", d, 2*ScopeBackoff)
	}
	if b.Known() {
		t.Errorf("a bucket nothing stated of learnt remaining %d from a bare refusal", b.Remaining)
	}

	g := NewBucket()
	Settle(nil, &g, 0, &Answer{Reading: githubCore(4000, t0.Add(time.Hour), t0), Counted: true}, t0)
	r := proxyRefusal(http.StatusTooManyRequests, t0, "Retry-After", "30")
	Settle(nil, &g, 0, &Answer{Reading: r, Sent: t0, BareWait: time.Minute}, t0)
	if !g.BlockedUntil.Equal(t0.Add(30 * time.Second)) {
		t.Errorf("Retry-After 30: blocked until +%v, want +30s exactly", g.BlockedUntil.Sub(t0))
	}
	if w := g.Wait(Policy{Kind: Greedy}, t0.Add(30*time.Second-time.Millisecond)); w != time.Millisecond {
		t.Errorf("just before the Retry-After: wait %v, want 1ms", w)
	}
	if g.Remaining != 4000 {
		t.Errorf("remaining %d after a bare refusal, want 4000 as stated before", g.Remaining)
	}
}

// A 403 page from a proxy is bare like a 429; a 403 with the API's own
// error body is what it says: a permission error touches nothing, GitHub's
// secondary message pauses the owner.
func Test403Kinds(t *testing.T) {
	b, o := NewBucket(), Owner{}
	Settle(&o, &b, 0, &Answer{Reading: githubCore(4000, t0.Add(time.Hour), t0), Counted: true}, t0)
	Settle(&o, &b, 0, &Answer{Reading: proxyRefusal(http.StatusForbidden, t0), Sent: t0, BareWait: time.Minute}, t0)
	if d := b.BlockedUntil.Sub(t0); d != time.Minute || b.Remaining != 4000 || !o.PenaltyUntil.IsZero() {
		t.Errorf("403 page: bucket paused %v, remaining %d, owner paused until %v; want 1m, 4000, none", d, b.Remaining, o.PenaltyUntil)
	}

	b, o = NewBucket(), Owner{}
	Settle(&o, &b, 0, &Answer{Reading: githubCore(4000, t0.Add(time.Hour), t0), Counted: true}, t0)
	perm := headers.Parse(http.StatusForbidden, http.Header{"Content-Type": {"application/json"}},
		[]byte(`{"message":"Resource not accessible by integration"}`), t0)
	Settle(&o, &b, 0, &Answer{Reading: &perm, Counted: true, Sent: t0, BareWait: time.Minute}, t0)
	if !b.BlockedUntil.IsZero() || !o.PenaltyUntil.IsZero() {
		t.Errorf("permission 403 paused the bucket until %v, the owner until %v", b.BlockedUntil, o.PenaltyUntil)
	}
	sec := headers.Parse(http.StatusForbidden, http.Header{"Content-Type": {"application/json"}},
		[]byte(`{"message":"You have exceeded a secondary rate limit."}`), t0)
	Settle(&o, &b, 0, &Answer{Reading: &sec, Sent: t0}, t0)
	if o.PenaltyUntil.Sub(t0) != SecondaryBase || !b.BlockedUntil.IsZero() {
		t.Errorf("secondary 403 paused the owner %v and the bucket until %v; want the owner %v", o.PenaltyUntil.Sub(t0), b.BlockedUntil, SecondaryBase)
	}
}

// A request with a scope takes a bare refusal to its scope, whatever its
// bucket's state: the bucket stays as its answers left it, even spent to
// its requests in flight.
func TestBareRefusalGoesToTheScope(t *testing.T) {
	b, s := NewBucket(), NewBucket()
	a := &Ask{Policy: Policy{Kind: Greedy}}
	Settle(nil, &b, 0, &Answer{Reading: gitlabMain(1, t0.Add(time.Minute)), Counted: true}, t0)
	id := reserveScoped(t, &b, &s, a, t0)
	SettleScoped(nil, &b, &s, id, &Answer{Reading: proxyRefusal(http.StatusTooManyRequests, t0), Sent: t0}, t0)
	if !b.BlockedUntil.IsZero() || b.Remaining != 1 {
		t.Errorf("bucket blocked until %v with %d left; want untouched, 1 left", b.BlockedUntil, b.Remaining)
	}
	if d := s.BlockedUntil.Sub(t0); d < ScopeBackoff {
		t.Errorf("scope paused %v, want at least %v", d, ScopeBackoff)
	}
}

// Bucket.Observe, without Settle's answer, takes a bare refusal as a pause
// too: nothing counted, nothing emptied.
func TestObserveBare(t *testing.T) {
	b := NewBucket()
	b.Observe(githubCore(4000, t0.Add(time.Hour), t0), t0, true, Default{})
	b.Observe(proxyRefusal(http.StatusTooManyRequests, t0), t0, true, Default{})
	if b.Remaining != 4000 || b.BlockedUntil.Sub(t0) != ScopeBackoff {
		t.Errorf("remaining %d, blocked %v; want 4000 and %v", b.Remaining, b.BlockedUntil.Sub(t0), ScopeBackoff)
	}
}
