package storetest

import (
	"bytes"
	"errors"
	"fmt"
	"strings"
	"testing"

	"golang.org/x/sync/errgroup"

	"github.com/ratekeeper/ratekeeper/store"
)

// Blobs: the bounded table behind the conditional-request cache.

func wantBlob(t *testing.T, s store.Store, key, value string) {
	t.Helper()
	got, ok, err := s.GetBlob(t.Context(), key)
	if err != nil || !ok || string(got) != value {
		t.Fatalf("GetBlob(%q) = %q, %v, %v; want %q, true, nil", key, got, ok, err, value)
	}
}

func wantNoBlob(t *testing.T, s store.Store, key string) {
	t.Helper()
	got, ok, err := s.GetBlob(t.Context(), key)
	if err != nil || ok || got != nil {
		t.Fatalf("GetBlob(%q) = %q, %v, %v; want nil, false, nil", key, got, ok, err)
	}
}

func mustPutBlob(t *testing.T, s store.Store, key, value string) {
	t.Helper()
	if err := s.PutBlob(t.Context(), key, []byte(value)); err != nil {
		t.Fatalf("PutBlob(%q): %v", key, err)
	}
}

func testBlobs(t *testing.T, b Backend) {
	s := b.open(t, store.Options{})
	ctx := t.Context()
	wantNoBlob(t, s, "body/1")
	mustPutBlob(t, s, "body/1", "hello")
	wantBlob(t, s, "body/1", "hello")
	mustPutBlob(t, s, "body/1", "replaced")
	wantBlob(t, s, "body/1", "replaced")
	mustPutBlob(t, s, "body/empty", "")
	got, ok, err := s.GetBlob(ctx, "body/empty")
	if err != nil || !ok || got == nil || len(got) != 0 {
		t.Fatalf("GetBlob of an empty blob = %q (nil: %v), %v, %v; want a non-nil empty slice", got, got == nil, ok, err)
	}
	if err := s.DeleteBlob(ctx, "body/1"); err != nil {
		t.Fatal(err)
	}
	wantNoBlob(t, s, "body/1")
	if err := s.DeleteBlob(ctx, "body/1"); err != nil {
		t.Fatalf("DeleteBlob of an absent blob: %v", err)
	}
	// Blobs and records are separate namespaces.
	mustPutBlob(t, s, "same", "blob")
	wantAbsent(t, s, "same")
}

func testBlobEviction(t *testing.T, b Backend) {
	// Every blob below is 2-byte key + 38-byte value = 40 bytes.
	s := b.open(t, store.Options{BlobLimit: 100})
	v := func(c byte) string { return strings.Repeat(string(c), 38) }
	mustPutBlob(t, s, "k1", v('1'))
	mustPutBlob(t, s, "k2", v('2'))
	wantBlob(t, s, "k1", v('1')) // k1 is now more recently used than k2
	mustPutBlob(t, s, "k3", v('3'))
	// 120 > 100: the least recently used (k2) went.
	wantNoBlob(t, s, "k2")
	wantBlob(t, s, "k1", v('1'))
	wantBlob(t, s, "k3", v('3'))

	// Replacing a blob counts only its new size: 40 + 10, then 90 fits.
	mustPutBlob(t, s, "k1", "12345678")
	mustPutBlob(t, s, "k4", v('4'))
	wantBlob(t, s, "k1", "12345678") // nothing went; LRU order now k1, k4, k3
	wantBlob(t, s, "k4", v('4'))
	wantBlob(t, s, "k3", v('3'))
	mustPutBlob(t, s, "k5", v('5')) // 130: k1 goes (120), then k4 (80)
	wantNoBlob(t, s, "k1")
	wantNoBlob(t, s, "k4")
	wantBlob(t, s, "k3", v('3'))
	wantBlob(t, s, "k5", v('5'))

	// Deleting frees its size; a total of exactly the limit is kept.
	if err := s.DeleteBlob(t.Context(), "k3"); err != nil {
		t.Fatal(err)
	}
	mustPutBlob(t, s, "k6", v('6'))
	mustPutBlob(t, s, "k7", strings.Repeat("7", 18)) // 40 + 40 + 20 = 100
	wantBlob(t, s, "k5", v('5'))
	wantBlob(t, s, "k6", v('6'))
	wantBlob(t, s, "k7", strings.Repeat("7", 18))
}

func testBlobTooLarge(t *testing.T, b Backend) {
	s := b.open(t, store.Options{BlobLimit: 50})
	mustPutBlob(t, s, "other", "kept")
	mustPutBlob(t, s, "big", "small for now")
	err := s.PutBlob(t.Context(), "big", bytes.Repeat([]byte("x"), 48)) // 3 + 48 > 50
	if !errors.Is(err, store.ErrBlobTooLarge) || !strings.Contains(err.Error(), "51 bytes") || !strings.Contains(err.Error(), "50 bytes") {
		t.Fatalf("PutBlob of 51 bytes with a 50-byte limit = %v; want ErrBlobTooLarge naming both sizes", err)
	}
	wantNoBlob(t, s, "big") // the stale older blob is gone
	wantBlob(t, s, "other", "kept")
	mustPutBlob(t, s, "big", strings.Repeat("x", 40)) // 43 fits, but not beside "other" (9)
	wantNoBlob(t, s, "other")
	wantBlob(t, s, "big", strings.Repeat("x", 40))
}

func testConcurrentBlobPuts(t *testing.T, b Backend) {
	// 40 blobs of 40 bytes each into room for 400 bytes: whatever the
	// interleaving, eviction keeps exactly the 10 most recent.
	s := b.open(t, store.Options{BlobLimit: 400})
	const goroutines, each = 4, 10
	var eg errgroup.Group
	for g := range goroutines {
		eg.Go(func() error {
			for i := range each {
				if err := s.PutBlob(t.Context(), fmt.Sprintf("b%d/%d", g, i), bytes.Repeat([]byte{'x'}, 36)); err != nil {
					return err
				}
			}
			return nil
		})
	}
	if err := eg.Wait(); err != nil {
		t.Fatal(err)
	}
	present := 0
	for g := range goroutines {
		for i := range each {
			_, ok, err := s.GetBlob(t.Context(), fmt.Sprintf("b%d/%d", g, i))
			if err != nil {
				t.Fatal(err)
			}
			if ok {
				present++
			}
		}
	}
	if present != 400/40 {
		t.Fatalf("%d blobs of 40 bytes survived under a 400-byte limit; want exactly 10", present)
	}
}
