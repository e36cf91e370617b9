package transport

import (
	"context"
	"encoding/json"
	"errors"
	"io"
	"net/http"
	"testing"
	"testing/synctest"
	"time"

	"github.com/ratekeeper/ratekeeper/headers"
	"github.com/ratekeeper/ratekeeper/quota"
	"github.com/ratekeeper/ratekeeper/sim"
)

// TestReadyAtAsksTheDecisionWithoutReserving: a WaitError's ReadyAt says
// when its request could go, by the decision Reserve takes: at first the
// reset its WaitError named; once a reading of a new window refills the
// bucket (another process's answer, in a shared State), now. Asking
// reserves nothing: the State's owners and buckets are as they were; and
// Reserve, asked the same, then reserves.
func TestReadyAtAsksTheDecisionWithoutReserving(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		st := NewMemoryState()
		s := newSim(t, sim.APIConfig{Dialect: "github", Limit: 2, Window: time.Hour,
			Tokens: []sim.TokenConfig{{Token: "tok-readyat-1", Owner: "alice"}}}, []string{"tok-readyat-1"}, func(o *Options) {
			o.State = st
			o.MaxWait = time.Minute
		})
		for _, path := range []string{"/repos/o/a", "/repos/o/b"} {
			resp := s.get(t, path)
			_, _ = io.Copy(io.Discard, resp.Body)
			resp.Body.Close()
		}
		req, _ := http.NewRequest(http.MethodGet, s.base+"/repos/o/r", nil)
		_, err := s.t.RoundTrip(req)
		var we *WaitError
		if !errors.As(err, &we) {
			t.Fatalf("third request: got %v, want a *WaitError (the hour's two requests are spent)", err)
		}
		if we.QuotaKey() == "" {
			t.Fatal("QuotaKey is empty for a transport's WaitError")
		}
		ctx := context.Background()
		before := stateJSON(t, st)
		at, err := we.ReadyAt(ctx)
		if err != nil {
			t.Fatal(err)
		}
		if !at.Equal(we.Until) {
			t.Errorf("ReadyAt = Until%+v, want Until: nothing changed since the decision", at.Sub(we.Until))
		}
		if after := stateJSON(t, st); after != before {
			t.Errorf("ReadyAt changed the State:\nbefore %s\nafter  %s", before, after)
		}

		// A reading of a new window: the quota is back.
		bs, _ := st.Buckets(ctx)
		var id BucketID
		for b := range bs {
			if b.Resource == "core" {
				id = b
			}
		}
		now := time.Now()
		r := headers.Reading{Status: 200, Limit: 2, Remaining: 2, Reset: now.Add(2 * time.Hour), Resource: "core"}
		if err := st.Settle(ctx, &SettleParams{Slot: Slot{Bucket: id}, Answer: quota.Answer{Reading: &r, Counted: true}, Now: now}); err != nil {
			t.Fatal(err)
		}
		before = stateJSON(t, st)
		if at, err = we.ReadyAt(ctx); err != nil || !at.Equal(now) {
			t.Errorf("ReadyAt after the refill = now%+v, %v; want now", at.Sub(now), err)
		}
		if after := stateJSON(t, st); after != before {
			t.Errorf("ReadyAt changed the State:\nbefore %s\nafter  %s", before, after)
		}
		// Reserve, asked the same, agrees: the request goes now.
		d, err := st.Reserve(ctx, &ReserveParams{Slots: we.waited.slots, Ask: we.waited.ask,
			Lease: quota.Lease{ID: 7, Until: now.Add(time.Minute)}, Now: now})
		if err != nil || d.Wait != 0 {
			t.Errorf("Reserve after the refill: wait %v, %v; want a reservation now, as ReadyAt said", d.Wait, err)
		}
	})
}

func stateJSON(t *testing.T, st State) string {
	t.Helper()
	bs, err := st.Buckets(context.Background())
	if err != nil {
		t.Fatal(err)
	}
	os, err := st.Owners(context.Background())
	if err != nil {
		t.Fatal(err)
	}
	m := map[string]any{}
	for id, b := range bs {
		m["bucket "+id.String()] = b
	}
	for id, o := range os {
		m["owner "+id.String()] = o
	}
	b, err := json.Marshal(m)
	if err != nil {
		t.Fatal(err)
	}
	return string(b)
}
