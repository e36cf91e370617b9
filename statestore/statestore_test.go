package statestore_test

import (
	"bytes"
	"context"
	"errors"
	"log/slog"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/ratekeeper/ratekeeper/quota"
	"github.com/ratekeeper/ratekeeper/statestore"
	"github.com/ratekeeper/ratekeeper/store"
	"github.com/ratekeeper/ratekeeper/transport"
)

func openSQLite(t *testing.T) store.Store {
	t.Helper()
	s, err := store.Open(context.Background(), filepath.Join(t.TempDir(), "state.db"), store.Options{})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { s.Close() })
	return s
}

func TestBucketsRoundTrip(t *testing.T) {
	ctx := context.Background()
	st := statestore.New(openSQLite(t), nil)
	id := transport.BucketID{Provider: "github https://api.github.com", Owner: "app:1/installation:2", Resource: "core"}
	reset := time.Date(2026, 1, 1, 1, 0, 0, 0, time.UTC)
	err := st.UpdateBucket(ctx, id, func(b *quota.Bucket) error {
		b.Limit, b.Remaining, b.Reset = 5000, 4000, reset
		return nil
	})
	if err != nil {
		t.Fatal(err)
	}
	all, err := st.Buckets(ctx)
	if err != nil {
		t.Fatal(err)
	}
	b, ok := all[id]
	if !ok || b.Remaining != 4000 || !b.Reset.Equal(reset) {
		t.Fatalf("buckets %+v", all)
	}
	// A failing update writes nothing.
	boom := errors.New("boom")
	if err := st.UpdateBucket(ctx, id, func(b *quota.Bucket) error { b.Remaining = 1; return boom }); !errors.Is(err, boom) {
		t.Fatal(err)
	}
	all, _ = st.Buckets(ctx)
	if all[id].Remaining != 4000 {
		t.Fatal("failed update was written")
	}
}

// readOnly records whether an update that changes nothing writes: it must
// not, so waits computed from shared state cost no write.
type countingStore struct {
	store.Store
	writes int
}

func (c *countingStore) Update(ctx context.Context, key string, fn func(*store.Record) error) error {
	return c.Store.Update(ctx, key, func(rec *store.Record) error {
		before := rec.Value
		err := fn(rec)
		if err == nil && string(before) != string(rec.Value) {
			c.writes++
		}
		return err
	})
}

func TestReadsWriteNothing(t *testing.T) {
	ctx := context.Background()
	cs := &countingStore{Store: openSQLite(t)}
	st := statestore.New(cs, nil)
	id := transport.OwnerID{Provider: "p", Owner: "o"}
	_ = st.UpdateOwner(ctx, id, func(o *quota.Owner) error { o.Strikes = 2; return nil })
	for i := 0; i < 3; i++ {
		_ = st.UpdateOwner(ctx, id, func(o *quota.Owner) error { return nil })
	}
	if cs.writes != 1 {
		t.Fatalf("%d writes, want 1", cs.writes)
	}
}

func TestCorruptedValueIgnoredAndLoggedOnce(t *testing.T) {
	ctx := context.Background()
	s := openSQLite(t)
	var logs bytes.Buffer
	st := statestore.New(s, slog.New(slog.NewTextHandler(&logs, nil)))
	id := transport.BucketID{Provider: "p", Owner: "o", Resource: "core"}
	if err := st.UpdateBucket(ctx, id, func(b *quota.Bucket) error { b.Remaining = 7; return nil }); err != nil {
		t.Fatal(err)
	}
	// Damage the value behind the store's back, the way a hand edit or an
	// older format would.
	all, _ := s.List(ctx, "bucket/")
	if err := s.Update(ctx, all[0].Key, func(r *store.Record) error { r.Value = []byte("{not json"); return nil }); err != nil {
		t.Fatal(err)
	}
	for i := 0; i < 3; i++ {
		var seen quota.Bucket
		if err := st.UpdateBucket(ctx, id, func(b *quota.Bucket) error { seen = *b; return nil }); err != nil {
			t.Fatal(err)
		}
		if seen.Remaining != quota.Unknown {
			t.Fatalf("corrupted value not ignored: %+v", seen)
		}
	}
	if n := strings.Count(logs.String(), "corrupted"); n != 1 {
		t.Fatalf("logged %d times:\n%s", n, logs.String())
	}
	// The next real update rebuilds it.
	_ = st.UpdateBucket(ctx, id, func(b *quota.Bucket) error { b.Remaining = 9; return nil })
	all2, _ := st.Buckets(ctx)
	if all2[id].Remaining != 9 {
		t.Fatalf("not rebuilt: %+v", all2[id])
	}
}

func TestCredentials(t *testing.T) {
	ctx := context.Background()
	st := statestore.New(openSQLite(t), nil)
	if _, ok, err := st.LoadCredential(ctx, "github", "token:00"); ok || err != nil {
		t.Fatal(ok, err)
	}
	rec := transport.CredentialRecord{Invalid: true, Reason: "GET /user answered 401", ValidatedAt: time.Unix(1, 0).UTC()}
	if err := st.SaveCredential(ctx, "github", "token:00", rec); err != nil {
		t.Fatal(err)
	}
	got, ok, err := st.LoadCredential(ctx, "github", "token:00")
	if err != nil || !ok || got != rec {
		t.Fatalf("%+v %v %v", got, ok, err)
	}
}
