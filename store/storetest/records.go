package storetest

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"strconv"
	"strings"
	"testing"
	"time"

	"golang.org/x/sync/errgroup"

	"github.com/ratekeeper/ratekeeper/store"
)

// Records: one key at a time (UpdateMany is in many.go).

func testCRUD(t *testing.T, b Backend) {
	clk := newClock()
	s := b.open(t, store.Options{Now: clk.Now})
	wantAbsent(t, s, "bucket/a")

	var seen store.Record
	mustUpdate(t, s, "bucket/a", func(rec *store.Record) error {
		seen = *rec
		rec.Value = []byte("one")
		return nil
	})
	if seen.Key != "bucket/a" || seen.Value != nil || seen.Version != 0 {
		t.Fatalf("fn saw %+v for an absent key; want Key set, nil Value, Version 0", seen)
	}
	rec := wantRecord(t, s, "bucket/a", "one", 1)
	if !rec.UpdatedAt.Equal(clk.Last()) {
		t.Fatalf("UpdatedAt = %v, want the clock's %v", rec.UpdatedAt, clk.Last())
	}

	mustUpdate(t, s, "bucket/a", func(rec *store.Record) error {
		seen = *rec
		rec.Value = append(rec.Value, "+two"...)
		return nil
	})
	if string(seen.Value) != "one" || seen.Version != 1 {
		t.Fatalf("fn saw Value %q Version %d; want \"one\" 1", seen.Value, seen.Version)
	}
	rec = wantRecord(t, s, "bucket/a", "one+two", 2)
	if !rec.UpdatedAt.Equal(clk.Last()) {
		t.Fatalf("UpdatedAt = %v, want the clock's %v", rec.UpdatedAt, clk.Last())
	}

	mustUpdate(t, s, "bucket/a", del)
	wantAbsent(t, s, "bucket/a")
	mustUpdate(t, s, "bucket/a", del) // deleting an absent key is fine
	wantAbsent(t, s, "bucket/a")

	mustUpdate(t, s, "bucket/a", set("again"))
	wantRecord(t, s, "bucket/a", "again", 1)
}

func testEmptyValue(t *testing.T, b Backend) {
	s := b.open(t, store.Options{})
	mustUpdate(t, s, "empty", set(""))
	rec := wantRecord(t, s, "empty", "", 1)
	if rec.Value == nil {
		t.Fatal("Get returned a nil Value for a key holding an empty value; want a non-nil empty slice")
	}
	mustUpdate(t, s, "empty", func(rec *store.Record) error {
		if rec.Value == nil {
			return errors.New("fn got a nil Value for a present key holding an empty value")
		}
		return nil
	})
	wantRecord(t, s, "empty", "", 2)
}

func testValuesAreCopied(t *testing.T, b Backend) {
	s := b.open(t, store.Options{})
	buf := []byte("original")
	mustUpdate(t, s, "k", func(rec *store.Record) error { rec.Value = buf; return nil })
	buf[0] = 'X'
	rec := wantRecord(t, s, "k", "original", 1)
	rec.Value[0] = 'Y'
	wantRecord(t, s, "k", "original", 1)
	if err := s.Update(t.Context(), "k", func(rec *store.Record) error {
		rec.Value[0] = 'Z' // then fail: the scribble must not be kept
		return errors.New("no")
	}); err == nil {
		t.Fatal("Update returned nil for a failing fn")
	}
	wantRecord(t, s, "k", "original", 1)
}

func testFnError(t *testing.T, b Backend) {
	s := b.open(t, store.Options{})
	errNo := errors.New("fn refuses")
	err := s.Update(t.Context(), "absent", func(rec *store.Record) error {
		rec.Value = []byte("should not be written")
		return errNo
	})
	if err != errNo {
		t.Fatalf("Update returned %v; want fn's error unchanged", err)
	}
	wantAbsent(t, s, "absent")

	mustUpdate(t, s, "present", set("v1"))
	err = s.Update(t.Context(), "present", func(rec *store.Record) error {
		rec.Value = nil // would delete
		return errNo
	})
	if err != errNo {
		t.Fatalf("Update returned %v; want fn's error unchanged", err)
	}
	wantRecord(t, s, "present", "v1", 1)
}

func testOnlyValueIsWritten(t *testing.T, b Backend) {
	s := b.open(t, store.Options{})
	mustUpdate(t, s, "k", func(rec *store.Record) error {
		rec.Key, rec.Version, rec.UpdatedAt = "other", 99, time.Unix(1, 0)
		rec.Value = []byte("v")
		return nil
	})
	rec := wantRecord(t, s, "k", "v", 1)
	if rec.UpdatedAt.Equal(time.Unix(1, 0)) {
		t.Fatal("UpdatedAt was taken from fn's record; want the store's clock")
	}
	wantAbsent(t, s, "other")
}

func testList(t *testing.T, b Backend) {
	s := b.open(t, store.Options{})
	keys := []string{"b", "a/2", "a/1", "ab", "a", "é/x", "a/\U0010FFFF", "a/\U0010FFFF/z", "a0", "\U0010FFFF"}
	for _, k := range keys {
		mustUpdate(t, s, k, set("v:"+k))
	}
	for _, tc := range []struct {
		prefix string
		want   []string
	}{
		{"", []string{"a", "a/1", "a/2", "a/\U0010FFFF", "a/\U0010FFFF/z", "a0", "ab", "b", "é/x", "\U0010FFFF"}},
		{"a/", []string{"a/1", "a/2", "a/\U0010FFFF", "a/\U0010FFFF/z"}},
		{"a/\U0010FFFF", []string{"a/\U0010FFFF", "a/\U0010FFFF/z"}},
		{"a", []string{"a", "a/1", "a/2", "a/\U0010FFFF", "a/\U0010FFFF/z", "a0", "ab"}},
		{"é", []string{"é/x"}},
		{"\U0010FFFF", []string{"\U0010FFFF"}},
		{"zz", nil},
		{"a/1", []string{"a/1"}},
	} {
		recs, err := s.List(t.Context(), tc.prefix)
		if err != nil {
			t.Fatalf("List(%q): %v", tc.prefix, err)
		}
		var got []string
		for _, rec := range recs {
			got = append(got, rec.Key)
			if string(rec.Value) != "v:"+rec.Key || rec.Version != 1 {
				t.Errorf("List(%q) returned %q = %q version %d; want %q version 1", tc.prefix, rec.Key, rec.Value, rec.Version, "v:"+rec.Key)
			}
		}
		if !slices.Equal(got, tc.want) {
			t.Errorf("List(%q) keys = %q; want %q", tc.prefix, got, tc.want)
		}
	}
}

func testInvalidKeys(t *testing.T, b Backend) {
	s := b.open(t, store.Options{})
	ctx := t.Context()
	for _, key := range []string{"", "bad\xffutf8", "nul\x00byte", strings.Repeat("k", store.MaxKeyLen+1)} {
		calls := 0
		err := s.Update(ctx, key, func(*store.Record) error { calls++; return nil })
		if !errors.Is(err, store.ErrInvalidKey) || calls != 0 {
			t.Errorf("Update(%.20q) = %v after %d fn calls; want ErrInvalidKey and no call", key, err, calls)
		}
		if _, err := s.Get(ctx, key); !errors.Is(err, store.ErrInvalidKey) {
			t.Errorf("Get(%.20q) = %v; want ErrInvalidKey", key, err)
		}
		if err := s.PutBlob(ctx, key, []byte("x")); !errors.Is(err, store.ErrInvalidKey) {
			t.Errorf("PutBlob(%.20q) = %v; want ErrInvalidKey", key, err)
		}
		if _, _, err := s.GetBlob(ctx, key); !errors.Is(err, store.ErrInvalidKey) {
			t.Errorf("GetBlob(%.20q) = %v; want ErrInvalidKey", key, err)
		}
		if key != "" {
			if _, err := s.List(ctx, key); !errors.Is(err, store.ErrInvalidKey) {
				t.Errorf("List(%.20q) = %v; want ErrInvalidKey", key, err)
			}
		}
	}
	mustUpdate(t, s, strings.Repeat("k", store.MaxKeyLen), set("longest key"))
}

func testCanceledContext(t *testing.T, b Backend) {
	s := b.open(t, store.Options{})
	ctx, cancel := context.WithCancel(t.Context())
	cancel()
	err := s.Update(ctx, "k", set("v"))
	if !errors.Is(err, context.Canceled) {
		t.Fatalf("Update with a canceled context = %v; want context.Canceled", err)
	}
	wantAbsent(t, s, "k")
}

func testConcurrentIncrements(t *testing.T, b Backend) {
	s := b.open(t, store.Options{})
	const goroutines, each = 8, 25
	var g errgroup.Group
	for i := range goroutines {
		g.Go(func() error {
			own := fmt.Sprintf("own/%d", i)
			for range each {
				for _, key := range []string{"shared", own} {
					if err := s.Update(t.Context(), key, increment); err != nil {
						return err
					}
				}
			}
			return nil
		})
	}
	if err := g.Wait(); err != nil {
		t.Fatal(err)
	}
	wantRecord(t, s, "shared", strconv.Itoa(goroutines*each), goroutines*each)
	for i := range goroutines {
		wantRecord(t, s, fmt.Sprintf("own/%d", i), strconv.Itoa(each), each)
	}
}

func testClose(t *testing.T, b Backend) {
	s := b.open(t, store.Options{})
	mustUpdate(t, s, "k", set("v"))
	if err := s.Close(); err != nil {
		t.Fatal(err)
	}
	ctx := t.Context()
	checks := map[string]error{
		"Update":     s.Update(ctx, "k", set("w")),
		"PutBlob":    s.PutBlob(ctx, "k", nil),
		"DeleteBlob": s.DeleteBlob(ctx, "k"),
	}
	_, checks["Get"] = s.Get(ctx, "k")
	_, checks["List"] = s.List(ctx, "")
	_, _, checks["GetBlob"] = s.GetBlob(ctx, "k")
	for name, err := range checks {
		if !errors.Is(err, store.ErrClosed) {
			t.Errorf("%s after Close = %v; want ErrClosed", name, err)
		}
	}
	if err := s.Close(); err != nil {
		t.Errorf("second Close = %v; want nil", err)
	}
}

// testDatabaseNow: every store tells the time on the clock its processes
// share; on one machine it is Options.Now, and on a server a clock that
// moves forward.
func testDatabaseNow(t *testing.T, b Backend) {
	fixed := time.Date(2026, 11, 25, 12, 0, 0, 0, time.UTC)
	s := b.open(t, store.Options{Now: func() time.Time { return fixed }})
	c, ok := s.(store.Clock)
	if !ok {
		t.Fatalf("%T does not implement store.Clock", s)
	}
	t1, err := c.DatabaseNow(t.Context())
	if err != nil {
		t.Fatal(err)
	}
	t2, err := c.DatabaseNow(t.Context())
	if err != nil {
		t.Fatal(err)
	}
	if !t1.Equal(fixed) && (t2.Before(t1) || time.Since(t1).Abs() > time.Hour) {
		t.Fatalf("DatabaseNow = %v then %v: neither Options.Now nor a server clock near ours", t1, t2)
	}
}
