package fleetsim_test

import (
	"context"
	"net/http"
	"sync"
	"testing"
	"time"

	"github.com/ratekeeper/ratekeeper/fleetsim"
	"github.com/ratekeeper/ratekeeper/headers"
	"github.com/ratekeeper/ratekeeper/provider"
	"github.com/ratekeeper/ratekeeper/store/quotastate"
	"github.com/ratekeeper/ratekeeper/transport"
)

// Each test below breaks one invariant on purpose — with a wrapper around
// the State, the server connection or the provider, never by editing
// the engine — and shows that the simulation catches it: the seed that
// finds it is fixed, and the first seeds are searched again to show it is
// not the only one.

// caught runs seeds from 1 until one breaks inv, and fails if none of
// the first max does; it returns the seed.
func caught(t *testing.T, inv string, max uint64, opts fleetsim.Options) uint64 {
	t.Helper()
	for seed := uint64(1); seed <= max; seed++ {
		res := fleetsim.Run(t, fleetsim.Draw(seed, fleetsim.Switches{}), opts)
		for _, v := range res.Violations {
			if v.Invariant == inv {
				t.Logf("seed %d finds it: %v", seed, v)
				return seed
			}
		}
	}
	t.Fatalf("no seed of the first %d broke invariant %s", max, inv)
	return 0
}

// aheadState reintroduces a block-like defect: after each reservation the
// State grants, it hands the next 8 requests of the process a unit within
// 250 ms without asking the shared state, whatever was refused meanwhile.
type aheadState struct {
	*quotastate.State
	mu    sync.Mutex
	units int
	at    time.Time
	slot  int
}

func (s *aheadState) Reserve(ctx context.Context, p *transport.ReserveParams) (transport.Decision, error) {
	s.mu.Lock()
	if s.units > 0 && p.Now.Sub(s.at) < 250*time.Millisecond && s.slot < len(p.Slots) {
		s.units--
		slot := s.slot
		s.mu.Unlock()
		return transport.Decision{Index: slot}, nil
	}
	s.mu.Unlock()
	d, err := s.State.Reserve(ctx, p)
	if err == nil && d.Wait == 0 {
		s.mu.Lock()
		s.units, s.at, s.slot = 8, p.Now, d.Index
		s.mu.Unlock()
	}
	return d, err
}

func TestBrokenAdmittedIsCaught(t *testing.T) {
	caught(t, fleetsim.InvAdmitted, 40, fleetsim.Options{
		WrapState: func(st *quotastate.State) transport.State { return &aheadState{State: st} }})
}

// forgetful drops every refusal before the shared state sees it: the
// request's lease is given back, but nothing is paused.
type forgetful struct{ *quotastate.State }

func (s forgetful) Settle(ctx context.Context, p *transport.SettleParams) error {
	if r := p.Answer.Reading; r != nil && r.Limited != headers.NotLimited {
		c := *p
		c.Answer.Reading = nil
		return s.State.Settle(ctx, &c)
	}
	return s.State.Settle(ctx, p)
}

func TestBrokenRefusedScopeIsCaught(t *testing.T) {
	caught(t, fleetsim.InvRefusedScope, 40, fleetsim.Options{
		WrapState: func(st *quotastate.State) transport.State { return forgetful{st} }})
}

func TestBrokenWriteSpacingIsCaught(t *testing.T) {
	// The client is told of no write spacing; the server keeps its own.
	caught(t, fleetsim.InvWriteSpacing, 40, fleetsim.Options{
		Provider: func(p *provider.Provider) { p.Secondary.WriteSpacing = 0 }})
}

// keepsLeases never frees a gone holder's leases, and takes leases of an
// hour: a killed process's leases stay.
type keepsLeases struct{ *quotastate.State }

func (s keepsLeases) FreeHolders(context.Context, func(string) bool) (int, error) { return 0, nil }

func (s keepsLeases) Reserve(ctx context.Context, p *transport.ReserveParams) (transport.Decision, error) {
	p.Lease.Until = p.Now.Add(time.Hour)
	return s.State.Reserve(ctx, p)
}

func TestBrokenLeasesIsCaught(t *testing.T) {
	caught(t, fleetsim.InvLeases, 60, fleetsim.Options{
		WrapState: func(st *quotastate.State) transport.State { return keepsLeases{st} }})
}

// resends sends a request again when the server answers 502: a retry
// layer that does not know a POST must go once.
type resends struct{ base http.RoundTripper }

func (r resends) RoundTrip(req *http.Request) (*http.Response, error) {
	resp, err := r.base.RoundTrip(req)
	if err == nil && resp.StatusCode == http.StatusBadGateway {
		resp.Body.Close()
		return r.base.RoundTrip(req)
	}
	return resp, err
}

func TestBrokenOnceIsCaught(t *testing.T) {
	caught(t, fleetsim.InvOnce, 60, fleetsim.Options{
		WrapBase: func(b http.RoundTripper) http.RoundTripper { return resends{b} }})
}
