package poll

import (
	"fmt"
	"testing"
	"time"
)

func TestOffsetIsStable(t *testing.T) {
	span := 5 * time.Minute
	// Fixed values: a fleet relies on them across versions and machines.
	// The SHA-256 of "worker-1" starts 0x13029f9e83d15b3d, 0.0742… of the
	// span.
	golden := map[string]time.Duration{
		"worker-1":     22277634487,
		"worker-2":     33883564132,
		"ci-runner-eu": 49829828368,
	}
	for id, want := range golden {
		for range 3 {
			if got := Offset(id, span); got != want {
				t.Fatalf("Offset(%q) = %v, want %v", id, got, want)
			}
		}
	}
	if Offset("", span) != 0 {
		t.Fatal("an empty ID has an offset")
	}
	if Offset("worker-1", 0) != 0 {
		t.Fatal("an empty span has an offset")
	}
}

func TestOffsetSpreadsAFleet(t *testing.T) {
	const n, bins = 10000, 10
	span := time.Hour
	var count [bins]int
	seen := map[time.Duration]bool{}
	for i := range n {
		o := Offset(fmt.Sprintf("worker-%d", i), span)
		count[int(o*bins/span)]++
		seen[o] = true
	}
	for b, c := range count {
		if c < n/bins*85/100 || c > n/bins*115/100 {
			t.Fatalf("bin %d holds %d of %d offsets: %v", b, c, n, count)
		}
	}
	if len(seen) < n-5 {
		t.Fatalf("only %d distinct offsets of %d", len(seen), n)
	}
	// Neighbouring IDs land far apart, not next to each other.
	a, b := Offset("worker-1", span), Offset("worker-2", span)
	if d := (a - b).Abs(); d < span/100 {
		t.Fatalf("worker-1 and worker-2 are %v apart", d)
	}
}

func TestTargetOffsetsSpreadOnePollersURLs(t *testing.T) {
	span := 4 * time.Minute
	for _, id := range []string{"", "worker-7"} {
		var got []time.Duration
		for i := range 4 {
			got = append(got, targetOffset(id, i, 4, span))
		}
		for i := range got {
			next := got[(i+1)%4]
			gap := (next - got[i] + span) % span
			if gap < span/4-time.Millisecond || gap > span/4+time.Millisecond {
				t.Fatalf("id %q: offsets %v are not a quarter apart", id, got)
			}
		}
		if id == "" && got[0] != 0 {
			t.Fatalf("without an ID the first URL waits %v", got[0])
		}
		if id != "" && got[0] != Offset(id, span) {
			t.Fatalf("the first URL's offset %v is not the worker's %v", got[0], Offset(id, span))
		}
	}
}
