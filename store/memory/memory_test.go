package memory_test

import (
	"testing"

	"github.com/ratekeeper/ratekeeper/store"
	"github.com/ratekeeper/ratekeeper/store/memory"
	"github.com/ratekeeper/ratekeeper/store/storetest"
)

var _ store.Store = (*memory.Store)(nil)

func TestMemory(t *testing.T) {
	storetest.Run(t, storetest.Backend{Open: func(t *testing.T, opts store.Options) store.Store {
		s, err := memory.New(opts)
		if err != nil {
			t.Fatal(err)
		}
		return s
	}})
}

func BenchmarkUpdate(b *testing.B) {
	s, err := memory.New(store.Options{})
	if err != nil {
		b.Fatal(err)
	}
	defer s.Close()
	storetest.BenchmarkUpdate(b, s)
}
