package statetest

import (
	"errors"
	"fmt"
	"io"
	"net/http"
	"net/http/httptest"
	"os"
	"os/exec"
	"strconv"
	"testing"
	"time"

	"github.com/ratekeeper/ratekeeper/creds"
	"github.com/ratekeeper/ratekeeper/internal/holder"
	"github.com/ratekeeper/ratekeeper/quota"
	"github.com/ratekeeper/ratekeeper/transport"
)

// These cases are about reservations whose holder is gone: a process
// killed with requests in flight. Each lease names its holder; a process
// that starts frees the leases of holders proven gone, so that nothing
// waits for their leases to lapse.

// testFreeHolders: FreeHolders removes the leases of the holders gone
// reports as gone, in owner and bucket, and no others.
func testFreeHolders(t *testing.T, b Backend) {
	s := b.New(t)
	var l leases
	a := slot("alice", "core")
	known(t, s, a, 5000, 5000, t0.Add(time.Hour), t0)
	ask := capped(4)
	for i := range 4 {
		lease := l.at(t0)
		lease.Holder = "dead"
		if i >= 2 {
			lease.Holder = "alive"
		}
		if _, w := reserve(t, s, ask, lease, t0, a); w > 0 {
			t.Fatalf("reservation %d waited %v", i, w)
		}
	}
	if _, w := reserve(t, s, ask, l.at(t0), t0, a); w == 0 {
		t.Fatal("a fifth request went with a cap of 4")
	}
	n, err := s.FreeHolders(t.Context(), func(h string) bool { return h == "dead" })
	if err != nil {
		t.Fatal(err)
	}
	if n != 4 {
		t.Fatalf("freed %d reservations, want 4 (2 in the owner, 2 in the bucket)", n)
	}
	o := ownerOf(t, s, a)
	bk := bucketOf(t, s, a)
	if o.InFlight(t0) != 2 || bk.InFlight(t0) != 2 {
		t.Fatalf("after freeing: owner %d, bucket %d in flight; want the live holder's 2", o.InFlight(t0), bk.InFlight(t0))
	}
	for i := range 2 {
		if _, w := reserve(t, s, ask, l.at(t0), t0, a); w > 0 {
			t.Fatalf("reservation %d after freeing waited %v", i, w)
		}
	}
	// Leases that name no holder (an older version's) are never freed:
	// only the live holder's 2, in owner and bucket.
	if n, err := s.FreeHolders(t.Context(), func(string) bool { return true }); err != nil || n != 4 {
		t.Fatalf("freeing every named holder: %d, %v; want 4", n, err)
	}
}

// deadHolder names a process of this machine that has ended.
func deadHolder(t *testing.T) string {
	t.Helper()
	exe, err := os.Executable()
	if err != nil {
		t.Fatal(err)
	}
	cmd := exec.Command(exe, "-test.run=^$")
	if err := cmd.Run(); err != nil {
		t.Fatal(err)
	}
	me := holder.Self()
	id := holder.ID{Host: me.Host, Boot: me.Boot, PID: cmd.Process.Pid, Start: "1"}
	if !holder.Gone(id.String()) {
		t.Fatalf("holder %s of an ended process is not gone", id)
	}
	return id.String()
}

// testTransportFreesDeadHolders: a process killed while it held the
// owner's whole concurrency cap does not stop the next one: the transport
// frees the dead holder's leases before its first request, which goes at
// once (the leases would otherwise hold for an hour here).
func testTransportFreesDeadHolders(t *testing.T, b Backend) {
	s := b.New(t)
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		w.Header().Set("X-RateLimit-Limit", "5000")
		w.Header().Set("X-RateLimit-Remaining", "4000")
		w.Header().Set("X-RateLimit-Reset", strconv.FormatInt(time.Now().Add(time.Hour).Unix(), 10))
		io.WriteString(w, "{}")
	}))
	defer srv.Close()
	const capN = 4
	// The killed process: its leases fill the cap, for an hour.
	dead := deadHolder(t)
	id := slotFor(srv.URL)
	now := time.Now()
	known(t, s, id, 5000, 4000, now.Add(time.Hour), now)
	for i := range capN {
		lease := quota.Lease{ID: uint64(1000 + i), Until: now.Add(time.Hour), Holder: dead}
		if _, w := reserve(t, s, capped(capN), lease, now, id); w > 0 {
			t.Fatalf("filling the cap: reservation %d waited %v", i, w)
		}
	}
	tr, err := newTransport(s, srv.URL, capN)
	if err != nil {
		t.Fatal(err)
	}
	defer tr.Close()
	for i := range capN + 2 {
		req, _ := http.NewRequest(http.MethodGet, fmt.Sprintf("%s/repos/o/r%d", srv.URL, i), nil)
		start := time.Now()
		resp, err := tr.RoundTrip(req)
		var we *transport.WaitError
		if errors.As(err, &we) {
			t.Fatalf("request %d after the holder died: %v", i, err)
		}
		if err != nil {
			t.Fatal(err)
		}
		resp.Body.Close()
		if d := time.Since(start); d > 2*time.Second {
			t.Fatalf("request %d took %v", i, d)
		}
	}
}

// testRemoteHolderSilent: a holder of another machine is freed once its
// heartbeat is older than transport.HolderTimeout, and not while it beats.
func testRemoteHolderSilent(t *testing.T, b Backend) {
	s := b.New(t)
	hb, ok := s.(transport.Heartbeats)
	if !ok {
		return // a State of one process: no other machine's holder
	}
	now := time.Now()
	silent, beating := "elsewhere-1/boot/10/1", "elsewhere-2/boot/20/1"
	if err := hb.Beat(t.Context(), silent, now.Add(-2*transport.HolderTimeout)); err != nil {
		t.Fatal(err)
	}
	if err := hb.Beat(t.Context(), beating, now); err != nil {
		t.Fatal(err)
	}
	srvURL := "http://api.test"
	id := slotFor(srvURL)
	known(t, s, id, 5000, 4000, now.Add(time.Hour), now)
	for i, h := range []string{silent, silent, beating} {
		lease := quota.Lease{ID: uint64(2000 + i), Until: now.Add(time.Hour), Holder: h}
		if _, w := reserve(t, s, capped(10), lease, now, id); w > 0 {
			t.Fatalf("reservation %d waited %v", i, w)
		}
	}
	tr, err := newTransport(s, srvURL, 10)
	if err != nil {
		t.Fatal(err)
	}
	defer tr.Close()
	// The first request runs the sweep; it may fail to connect, which
	// does not matter here.
	req, _ := http.NewRequest(http.MethodGet, srvURL+"/repos/o/r", nil)
	if resp, err := tr.RoundTrip(req); err == nil {
		resp.Body.Close()
	}
	beats, err := hb.Beats(t.Context())
	if err != nil {
		t.Fatal(err)
	}
	if len(beats) != 3 {
		t.Fatalf("beats %v: want the two others' and the transport's own", beats)
	}
	o := ownerOf(t, s, id)
	var holders []string
	for _, l := range o.Leases {
		holders = append(holders, l.Holder)
	}
	if len(holders) != 1 || holders[0] != beating {
		t.Fatalf("holders left %v, want only the one still beating", holders)
	}
}

// slotFor is the slot of newTransport's one token for the core resource
// of the provider at url.
func slotFor(url string) transport.Slot {
	c := creds.NewToken("github", 1, "tok-statetest-1", "test")
	key := "github " + url
	return transport.Slot{
		Owner:  transport.OwnerID{Provider: key, Owner: c.BucketOwner()},
		Bucket: transport.BucketID{Provider: key, Owner: c.BucketOwner(), Resource: "core"},
	}
}
