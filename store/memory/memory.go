// Package memory is the store (store.Store) held in this process's
// memory: updates are atomic among its goroutines and everything is gone
// when the process exits. It suits a library user with a single client;
// store.Open gives it for "" and "memory".
//
// Layer 2 of docs/architecture.md: above package store, with which it registers.
package memory

import (
	"container/list"
	"context"
	"fmt"
	"sort"
	"strings"
	"sync"
	"time"

	"github.com/ratekeeper/ratekeeper/store/internal/core"
)

// Store is a store.Store held in this process's memory: updates are atomic
// among goroutines, and everything is lost when the process exits.
type Store struct {
	opts   core.Options
	closed core.ClosedFlag

	mu      sync.Mutex // guards records; held while an update's fn runs
	records map[string]core.Record
	news    core.News // counted under mu, before the update's rows can be read

	blobMu    sync.Mutex // guards the blob fields
	blobs     map[string]*list.Element
	blobOrder *list.List // of *memBlob, most recently used at the front
	blobSize  int64
}

type memBlob struct {
	key   string
	value []byte
}

func (b *memBlob) size() int64 { return int64(len(b.key) + len(b.value)) }

// New returns an empty in-memory store. It fails only when opts is
// invalid.
func New(opts core.Options) (*Store, error) {
	opts, err := opts.WithDefaults()
	if err != nil {
		return nil, err
	}
	return &Store{
		opts:      opts,
		records:   map[string]core.Record{},
		blobs:     map[string]*list.Element{},
		blobOrder: list.New(),
	}, nil
}

// begin checks what every call checks first.
func (m *Store) begin(ctx context.Context, key string) error {
	if err := m.closed.Check(); err != nil {
		return err
	}
	if err := ctx.Err(); err != nil {
		return err
	}
	return core.ValidateKey(key)
}

// Update implements store.Store. fn runs with the whole store locked; that is fine
// because fn is a quick pure function.
func (m *Store) Update(ctx context.Context, key string, fn func(rec *core.Record) error) error {
	if err := m.begin(ctx, key); err != nil {
		return err
	}
	m.mu.Lock()
	defer m.mu.Unlock()
	old, ok := m.records[key]
	rec := core.Record{Key: key}
	if ok {
		rec = old
		rec.Value = core.CloneBytes(old.Value) // fn may scribble on it
	}
	if err := fn(&rec); err != nil {
		return err
	}
	if rec.Value == nil {
		delete(m.records, key)
	} else {
		m.records[key] = core.Record{Key: key, Value: core.CloneBytes(rec.Value), Version: old.Version + 1, UpdatedAt: m.opts.Stamp()}
	}
	if ok || rec.Value != nil {
		m.news.Committed(ctx)
	}
	return nil
}

// UpdateMany implements store.Store.
func (m *Store) UpdateMany(ctx context.Context, keys []string, fn func(recs []*core.Record) error) error {
	if err := m.closed.Check(); err != nil {
		return err
	}
	if err := ctx.Err(); err != nil {
		return err
	}
	if err := core.ValidateKeys(keys); err != nil {
		return err
	}
	m.mu.Lock()
	defer m.mu.Unlock()
	olds := make([]core.Record, len(keys))
	recs := make([]*core.Record, len(keys))
	for i, key := range keys {
		old, ok := m.records[key]
		if !ok {
			old = core.Record{Key: key}
		}
		olds[i] = old
		rec := old
		rec.Value = core.CloneBytes(old.Value)
		recs[i] = &rec
	}
	if err := fn(recs); err != nil {
		return err
	}
	now := m.opts.Stamp()
	wrote := false
	for i, key := range keys {
		old, v := olds[i], recs[i].Value
		switch {
		case !core.Changed(old.Value, old.Value != nil, v):
			continue
		case v == nil:
			delete(m.records, key)
		default:
			m.records[key] = core.Record{Key: key, Value: core.CloneBytes(v), Version: old.Version + 1, UpdatedAt: now}
		}
		wrote = true
	}
	if wrote {
		m.news.Committed(ctx)
	}
	return nil
}

// News implements store.Newsboard: the commits that carried news, counted
// before their rows can be read. Every process sharing a memory store
// shares this one value, so each hears the others' news at once.
func (m *Store) News() uint64 { return m.news.Count() }

// Get implements store.Store.
func (m *Store) Get(ctx context.Context, key string) (core.Record, error) {
	if err := m.begin(ctx, key); err != nil {
		return core.Record{}, err
	}
	m.mu.Lock()
	defer m.mu.Unlock()
	rec, ok := m.records[key]
	if !ok {
		return core.Record{}, fmt.Errorf("%w: %q", core.ErrNotFound, key)
	}
	rec.Value = core.CloneBytes(rec.Value)
	return rec, nil
}

// DatabaseNow implements store.Clock: Options.Now.
func (m *Store) DatabaseNow(context.Context) (time.Time, error) {
	if err := m.closed.Check(); err != nil {
		return time.Time{}, err
	}
	return m.opts.Now(), nil
}

// GetMany implements store.Snapshot.
func (m *Store) GetMany(ctx context.Context, keys []string) ([]core.Record, error) {
	if err := m.closed.Check(); err != nil {
		return nil, err
	}
	if err := core.ValidateKeys(keys); err != nil {
		return nil, err
	}
	m.mu.Lock()
	defer m.mu.Unlock()
	out := make([]core.Record, len(keys))
	for i, k := range keys {
		rec, ok := m.records[k]
		if !ok {
			rec = core.Record{Key: k}
		}
		rec.Value = core.CloneBytes(rec.Value)
		out[i] = rec
	}
	return out, nil
}

// List implements store.Store.
func (m *Store) List(ctx context.Context, prefix string) ([]core.Record, error) {
	if err := m.closed.Check(); err != nil {
		return nil, err
	}
	if err := core.ValidatePrefix(prefix, "prefix"); err != nil {
		return nil, err
	}
	m.mu.Lock()
	defer m.mu.Unlock()
	var out []core.Record
	for key, rec := range m.records {
		if strings.HasPrefix(key, prefix) {
			rec.Value = core.CloneBytes(rec.Value)
			out = append(out, rec)
		}
	}
	sort.Slice(out, func(i, j int) bool { return out[i].Key < out[j].Key })
	return out, nil
}

// GetBlob implements store.Blobs.
func (m *Store) GetBlob(ctx context.Context, key string) ([]byte, bool, error) {
	if err := m.begin(ctx, key); err != nil {
		return nil, false, err
	}
	m.blobMu.Lock()
	defer m.blobMu.Unlock()
	el, ok := m.blobs[key]
	if !ok {
		return nil, false, nil
	}
	m.blobOrder.MoveToFront(el)
	return core.CloneBytes(el.Value.(*memBlob).value), true, nil
}

// PutBlob implements store.Blobs.
func (m *Store) PutBlob(ctx context.Context, key string, value []byte) error {
	if err := m.begin(ctx, key); err != nil {
		return err
	}
	m.blobMu.Lock()
	defer m.blobMu.Unlock()
	m.deleteBlobLocked(key)
	b := &memBlob{key: key, value: core.CloneBytes(value)}
	if b.value == nil {
		b.value = []byte{}
	}
	if b.size() > m.opts.BlobLimit {
		return core.BlobTooLarge(key, b.size(), m.opts.BlobLimit)
	}
	m.blobs[key] = m.blobOrder.PushFront(b)
	m.blobSize += b.size()
	for m.blobSize > m.opts.BlobLimit {
		m.deleteBlobLocked(m.blobOrder.Back().Value.(*memBlob).key)
	}
	return nil
}

// TouchBlob implements store.Blobs.
func (m *Store) TouchBlob(ctx context.Context, key string) error {
	if err := m.begin(ctx, key); err != nil {
		return err
	}
	m.blobMu.Lock()
	defer m.blobMu.Unlock()
	if el, ok := m.blobs[key]; ok {
		m.blobOrder.MoveToFront(el)
	}
	return nil
}

// DeleteBlob implements store.Blobs.
func (m *Store) DeleteBlob(ctx context.Context, key string) error {
	if err := m.begin(ctx, key); err != nil {
		return err
	}
	m.blobMu.Lock()
	defer m.blobMu.Unlock()
	m.deleteBlobLocked(key)
	return nil
}

func (m *Store) deleteBlobLocked(key string) {
	if el, ok := m.blobs[key]; ok {
		m.blobSize -= el.Value.(*memBlob).size()
		m.blobOrder.Remove(el)
		delete(m.blobs, key)
	}
}

// Close implements store.Store. The contents are left to the garbage collector.
func (m *Store) Close() error {
	m.closed.Close()
	return nil
}
