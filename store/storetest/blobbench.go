package storetest

import (
	"bytes"
	"fmt"
	"math/rand/v2"
	"runtime"
	"sync/atomic"
	"testing"

	"github.com/ratekeeper/ratekeeper/store"
)

// BenchmarkBlobs measures the blob table as the shared response cache uses
// it, from 8 goroutines spread over 1 or 2 store handles on one database
// (two handles are what two processes sharing a --db amount to: each has
// its own connections). newDSN names a fresh database.
//
//   - put: each op stores a 2 KiB blob under one of 4,096 keys into a
//     1 MiB table, so nearly every put evicts;
//   - hit: each op reads one of 256 blobs already there;
//   - mixed: 9 hits to 1 put, as a cache that mostly revalidates sees
//     (into the default 64 MiB table, so the hits stay hits).
func BenchmarkBlobs(b *testing.B, newDSN func(b testing.TB) string) {
	for _, handles := range []int{1, 2} {
		for _, mode := range []string{"put", "hit", "mixed"} {
			b.Run(fmt.Sprintf("%s/handles=%d", mode, handles), func(b *testing.B) {
				benchmarkBlobs(b, newDSN(b), handles, mode)
			})
		}
	}
}

func benchmarkBlobs(b *testing.B, dsn string, handles int, mode string) {
	const (
		size    = 2 << 10
		hot     = 256
		keys    = 4096
		workers = 8
	)
	stores := make([]store.Store, handles)
	for i := range stores {
		opts := store.Options{Advisory: true} // as the CLI opens its cache
		if mode == "put" {
			opts.BlobLimit = 1 << 20
		}
		s, err := store.Open(b.Context(), dsn, opts)
		if err != nil {
			b.Fatal(err)
		}
		defer s.Close()
		stores[i] = s
	}
	value := bytes.Repeat([]byte{'x'}, size)
	key := func(i int) string { return fmt.Sprintf("httpcache/bench/%06d", i) }
	for i := range hot { // the hot set, read by "hit" and "mixed"
		if err := stores[0].PutBlob(b.Context(), key(i), value); err != nil {
			b.Fatal(err)
		}
	}
	var next atomic.Int64
	b.SetParallelism(max(1, workers/runtime.GOMAXPROCS(0)))
	b.ReportAllocs()
	b.ResetTimer()
	b.RunParallel(func(pb *testing.PB) {
		s := stores[int(next.Add(1))%handles]
		ctx := b.Context()
		for n := 0; pb.Next(); n++ {
			var err error
			switch {
			case mode == "hit" || (mode == "mixed" && n%10 != 0):
				var ok bool
				if _, ok, err = s.GetBlob(ctx, key(rand.IntN(hot))); err == nil && !ok && mode == "hit" {
					err = fmt.Errorf("a blob of the hot set was evicted")
				}
			default:
				err = s.PutBlob(ctx, key(hot+rand.IntN(keys-hot)), value)
			}
			if err != nil {
				b.Error(err)
				return
			}
		}
	})
}
