package quotastate

import (
	"math/rand/v2"
	"testing"
)

// handouts answers as the map it stands for: random puts (some of an ID
// already out), gets and drops, past the slice into the map and back.
func TestHandoutsAgreeWithAMap(t *testing.T) {
	rng := rand.New(rand.NewPCG(7, 8))
	blocks := []*block{{}, {}, {}}
	var h handouts
	want := map[uint64]*block{}
	for i := range 20000 {
		id := uint64(rng.IntN(3 * fewHandouts))
		switch rng.IntN(3) {
		case 0:
			b := blocks[rng.IntN(len(blocks))]
			h.put(id, b)
			want[id] = b
		case 1:
			h.drop(id)
			delete(want, id)
		}
		got, ok := h.get(id)
		if w, wok := want[id]; got != w || ok != wok {
			t.Fatalf("step %d: get(%d) = %p, %v; the map says %p, %v", i, id, got, ok, w, wok)
		}
		if n := len(h.few) + len(h.many); n != len(want) {
			t.Fatalf("step %d: %d handouts, the map has %d", i, n, len(want))
		}
	}
}
