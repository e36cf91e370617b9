package kv

import (
	"container/list"
	"context"
	"fmt"
	"sort"
	"strings"
	"sync"
)

// Memory is a Store held in this process's memory: updates are atomic among
// goroutines, and everything is lost when the process exits.
type Memory struct {
	opts   Options
	closed closedFlag

	mu      sync.Mutex // guards records; held while an update's fn runs
	records map[string]Record

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

// NewMemory returns an empty in-memory store. It fails only when opts is
// invalid.
func NewMemory(opts Options) (*Memory, error) {
	opts, err := opts.withDefaults()
	if err != nil {
		return nil, err
	}
	return &Memory{
		opts:      opts,
		records:   map[string]Record{},
		blobs:     map[string]*list.Element{},
		blobOrder: list.New(),
	}, nil
}

// begin checks what every call checks first.
func (m *Memory) begin(ctx context.Context, key string) error {
	if err := m.closed.check(); err != nil {
		return err
	}
	if err := ctx.Err(); err != nil {
		return err
	}
	return ValidateKey(key)
}

// Update implements Store. fn runs with the whole store locked; that is fine
// because fn is a quick pure function.
func (m *Memory) Update(ctx context.Context, key string, fn func(rec *Record) error) error {
	if err := m.begin(ctx, key); err != nil {
		return err
	}
	m.mu.Lock()
	defer m.mu.Unlock()
	old, ok := m.records[key]
	rec := Record{Key: key}
	if ok {
		rec = old
		rec.Value = cloneBytes(old.Value) // fn may scribble on it
	}
	if err := fn(&rec); err != nil {
		return err
	}
	if rec.Value == nil {
		delete(m.records, key)
		return nil
	}
	m.records[key] = Record{Key: key, Value: cloneBytes(rec.Value), Version: old.Version + 1, UpdatedAt: m.opts.now()}
	return nil
}

// UpdateMany implements Store.
func (m *Memory) UpdateMany(ctx context.Context, keys []string, fn func(recs []*Record) error) error {
	if err := m.closed.check(); err != nil {
		return err
	}
	if err := ctx.Err(); err != nil {
		return err
	}
	if err := validateKeys(keys); err != nil {
		return err
	}
	m.mu.Lock()
	defer m.mu.Unlock()
	olds := make([]Record, len(keys))
	recs := make([]*Record, len(keys))
	for i, key := range keys {
		old, ok := m.records[key]
		if !ok {
			old = Record{Key: key}
		}
		olds[i] = old
		rec := old
		rec.Value = cloneBytes(old.Value)
		recs[i] = &rec
	}
	if err := fn(recs); err != nil {
		return err
	}
	now := m.opts.now()
	for i, key := range keys {
		old, v := olds[i], recs[i].Value
		switch {
		case !changed(old.Value, old.Value != nil, v):
		case v == nil:
			delete(m.records, key)
		default:
			m.records[key] = Record{Key: key, Value: cloneBytes(v), Version: old.Version + 1, UpdatedAt: now}
		}
	}
	return nil
}

// Get implements Store.
func (m *Memory) Get(ctx context.Context, key string) (Record, error) {
	if err := m.begin(ctx, key); err != nil {
		return Record{}, err
	}
	m.mu.Lock()
	defer m.mu.Unlock()
	rec, ok := m.records[key]
	if !ok {
		return Record{}, fmt.Errorf("%w: %q", ErrNotFound, key)
	}
	rec.Value = cloneBytes(rec.Value)
	return rec, nil
}

// List implements Store.
func (m *Memory) List(ctx context.Context, prefix string) ([]Record, error) {
	if err := m.closed.check(); err != nil {
		return nil, err
	}
	if err := validatePrefix(prefix, "prefix"); err != nil {
		return nil, err
	}
	m.mu.Lock()
	defer m.mu.Unlock()
	var out []Record
	for key, rec := range m.records {
		if strings.HasPrefix(key, prefix) {
			rec.Value = cloneBytes(rec.Value)
			out = append(out, rec)
		}
	}
	sort.Slice(out, func(i, j int) bool { return out[i].Key < out[j].Key })
	return out, nil
}

// GetBlob implements Blobs.
func (m *Memory) GetBlob(ctx context.Context, key string) ([]byte, bool, error) {
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
	return cloneBytes(el.Value.(*memBlob).value), true, nil
}

// PutBlob implements Blobs.
func (m *Memory) PutBlob(ctx context.Context, key string, value []byte) error {
	if err := m.begin(ctx, key); err != nil {
		return err
	}
	m.blobMu.Lock()
	defer m.blobMu.Unlock()
	m.deleteBlobLocked(key)
	b := &memBlob{key: key, value: cloneBytes(value)}
	if b.value == nil {
		b.value = []byte{}
	}
	if b.size() > m.opts.BlobLimit {
		return blobTooLarge(key, b.size(), m.opts.BlobLimit)
	}
	m.blobs[key] = m.blobOrder.PushFront(b)
	m.blobSize += b.size()
	for m.blobSize > m.opts.BlobLimit {
		m.deleteBlobLocked(m.blobOrder.Back().Value.(*memBlob).key)
	}
	return nil
}

// DeleteBlob implements Blobs.
func (m *Memory) DeleteBlob(ctx context.Context, key string) error {
	if err := m.begin(ctx, key); err != nil {
		return err
	}
	m.blobMu.Lock()
	defer m.blobMu.Unlock()
	m.deleteBlobLocked(key)
	return nil
}

func (m *Memory) deleteBlobLocked(key string) {
	if el, ok := m.blobs[key]; ok {
		m.blobSize -= el.Value.(*memBlob).size()
		m.blobOrder.Remove(el)
		delete(m.blobs, key)
	}
}

// Close implements Store. The contents are left to the garbage collector.
func (m *Memory) Close() error {
	m.closed.close()
	return nil
}

func blobTooLarge(key string, size, limit int64) error {
	return fmt.Errorf("%w: blob %q is %d bytes (key + value) but the blob limit is %d bytes; raise the limit or do not cache it", ErrBlobTooLarge, key, size, limit)
}
