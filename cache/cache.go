package cache

import (
	"bytes"
	"context"
	"encoding/hex"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"net/http"
	"slices"
	"sync/atomic"
	"time"
)

// HeaderName is the marker header the cache adds to responses it handled.
const HeaderName = "X-Ratekeeper-Cache"

// Values of the marker header.
const (
	// Revalidated marks a stored 200 returned in place of the server's 304.
	Revalidated = "revalidated"
	// Miss marks a full response from the server that the cache stored.
	Miss = "miss"
)

// Defaults for Options.
const (
	DefaultMaxBytes      = 64 << 20
	DefaultMaxEntryBytes = 8 << 20
)

// defaultCredentialHeaders carry tokens for every provider ratekeeper knows.
var defaultCredentialHeaders = []string{"Authorization", "Private-Token", "Job-Token"}

// Options configures a Cache. The zero value is ready to use: a 64 MiB
// memory LRU.
type Options struct {
	// MaxBytes bounds the approximate total size of the memory LRU (bodies,
	// header fields and bookkeeping); 0 or less means DefaultMaxBytes. It
	// does not apply to a Backend, which bounds its own size.
	MaxBytes int64
	// MaxEntryBytes bounds the body of one stored response; larger bodies
	// pass through unstored. 0 or less means DefaultMaxEntryBytes; with the
	// memory LRU it is at most MaxBytes.
	MaxEntryBytes int64
	// Backend, when set, holds the entries instead of the memory LRU, so
	// several processes can share them.
	Backend Backend
	// CredentialHeaders names request header fields that carry credentials,
	// beyond Authorization, PRIVATE-TOKEN and JOB-TOKEN (always included),
	// such as a custom provider's "X-Api-Key". Their values are never keyed
	// on, hashed or stored, even when a response varies on them: the owner
	// passed to Prepare and Store partitions entries by credential instead.
	CredentialHeaders []string
	// Logger receives warnings about backend errors and corrupted blobs;
	// nil discards them. Messages carry a short key digest, never a URL,
	// owner or token.
	Logger *slog.Logger
	// Now stamps Entry.StoredAt; nil means time.Now.
	Now func() time.Time
}

// Cache stores responses to GET requests with their validators and turns
// the server's 304s back into those responses. It is safe for concurrent
// use. A nil *Cache is a disabled cache: Prepare returns nil, Store returns
// the response untouched.
type Cache struct {
	maxEntry   int64
	mem        *lru // nil when backend is set
	backend    Backend
	credential []string // canonical credential header names
	log        *slog.Logger
	now        func() time.Time

	hits, misses, revalidations, stores, failures atomic.Uint64
}

// New returns a Cache configured by opts.
func New(opts Options) *Cache {
	if opts.MaxBytes <= 0 {
		opts.MaxBytes = DefaultMaxBytes
	}
	if opts.MaxEntryBytes <= 0 {
		opts.MaxEntryBytes = DefaultMaxEntryBytes
	}
	if opts.Backend == nil && opts.MaxEntryBytes > opts.MaxBytes {
		opts.MaxEntryBytes = opts.MaxBytes
	}
	if opts.Logger == nil {
		opts.Logger = slog.New(slog.DiscardHandler)
	}
	if opts.Now == nil {
		opts.Now = time.Now
	}
	c := &Cache{
		maxEntry:   opts.MaxEntryBytes,
		backend:    opts.Backend,
		credential: slices.Clone(defaultCredentialHeaders),
		log:        opts.Logger,
		now:        opts.Now,
	}
	for _, h := range opts.CredentialHeaders {
		if h = http.CanonicalHeaderKey(h); h != "" && !slices.Contains(c.credential, h) {
			c.credential = append(c.credential, h)
		}
	}
	if c.backend == nil {
		c.mem = newLRU(opts.MaxBytes)
	}
	return c
}

// Stats counts what a Cache has done since New.
type Stats struct {
	// Entries and Bytes describe the memory LRU (both 0 with a Backend):
	// how many responses it holds and their approximate total size.
	Entries int
	Bytes   int64
	// Hits counts 304s turned into stored 200s by Revalidated.
	Hits uint64
	// Misses counts Prepare calls on a cacheable request that found no
	// usable entry (none stored, or one for other Vary values).
	Misses uint64
	// Revalidations counts Prepare calls that found an entry and set
	// validators; those not followed by a hit got a new response instead.
	Revalidations uint64
	// Stores counts responses stored.
	Stores uint64
	// Evictions counts entries the memory LRU dropped to stay within
	// MaxBytes.
	Evictions uint64
	// Errors counts backend errors and corrupted blobs (each also logged).
	Errors uint64
}

// Stats returns the cache's counters.
func (c *Cache) Stats() Stats {
	if c == nil {
		return Stats{}
	}
	s := Stats{
		Hits:          c.hits.Load(),
		Misses:        c.misses.Load(),
		Revalidations: c.revalidations.Load(),
		Stores:        c.stores.Load(),
		Errors:        c.failures.Load(),
	}
	if c.mem != nil {
		s.Entries, s.Bytes, s.Evictions = c.mem.stats()
	}
	return s
}

// Prepare looks up a stored response for req as seen by owner, the
// credential owner the request is sent as ("" for anonymous), and when
// there is one adds its validators to req: If-None-Match with the stored
// ETag and If-Modified-Since with the stored Last-Modified, whichever the
// response had. It returns the entry to give Revalidated if the server
// answers 304, or nil when there is nothing to revalidate.
//
// An entry matches when req is a GET for the same canonical URL by the same
// owner with the same Accept values, and carries the same values as the
// storing request for every header the stored response named in Vary
// (credential headers excepted, as the owner stands for them).
//
// Prepare modifies req.Header, so req must be the caller's own copy (a
// RoundTripper clones the request first). Call it once per attempt, on a
// new copy of the original request, after choosing the credential: a
// request still carrying validators from an earlier Prepare looks like one
// the caller made conditional. It leaves req alone and returns
// nil for a request the caller made conditional itself (If-None-Match,
// If-Modified-Since, If-Match, If-Unmodified-Since or If-Range set: the
// caller runs its own cache), for a Range request, for Cache-Control:
// no-store, for any method but GET (HEAD included), and for owner "" when
// req already carries a credential header (a token the transport did not
// add, whose owner the cache cannot know).
//
// On a miss with the memory LRU, Prepare does not allocate.
func (c *Cache) Prepare(req *http.Request, owner string) *Entry {
	if c == nil || !c.usable(req, owner) || isConditional(req.Header) {
		return nil
	}
	k := requestKey(req, owner)
	e := c.lookup(req.Context(), k)
	if e == nil || !e.matches(req) {
		c.misses.Add(1)
		return nil
	}
	if req.Header == nil {
		req.Header = make(http.Header, 2)
	}
	// The value slices are the entry's own (capacity 1, so an Add makes a
	// new one): setting them allocates nothing.
	if e.inm != nil {
		req.Header["If-None-Match"] = e.inm
	}
	if e.ims != nil {
		req.Header["If-Modified-Since"] = e.ims
	}
	c.revalidations.Add(1)
	return e
}

// Revalidated returns the response for a request whose 304 answered the
// validators Prepare set from entry: the stored status and body with the
// stored header fields updated from the 304's (RFC 9111 §4.3.4: each field
// the 304 carries replaces the stored one, except Content-Length,
// Content-Encoding, Content-Range and hop-by-hop fields, which describe the
// 304's own framing), plus X-Ratekeeper-Cache: revalidated. The response
// keeps the 304's Request, protocol and TLS state; its body reads the
// stored bytes. Revalidated takes over resp304: it closes its body and
// reuses its Header map for the result, so the caller must not use resp304
// afterwards.
//
// When the 304 names an ETag or Last-Modified other than the stored one,
// the stored entry is updated to carry them (and the refreshed fields).
//
// If resp304 is not a 304, or entry is nil, it is returned unchanged.
func (c *Cache) Revalidated(entry *Entry, resp304 *http.Response) *http.Response {
	if c == nil || entry == nil || resp304 == nil || resp304.StatusCode != http.StatusNotModified {
		return resp304
	}
	if resp304.Body != nil {
		resp304.Body.Close()
	}
	c.hits.Add(1)
	etag, lm := resp304.Header.Get("Etag"), resp304.Header.Get("Last-Modified")
	h := mergeInto(resp304.Header, entry, Revalidated)
	r := &revalidatedResponse{}
	r.body.Reset(entry.body)
	r.Response = http.Response{
		Status:        "200 OK",
		StatusCode:    http.StatusOK,
		Proto:         resp304.Proto,
		ProtoMajor:    resp304.ProtoMajor,
		ProtoMinor:    resp304.ProtoMinor,
		Header:        h,
		Body:          &r.body,
		ContentLength: int64(len(entry.body)),
		Close:         resp304.Close,
		Uncompressed:  entry.uncompressed,
		Request:       resp304.Request,
		TLS:           resp304.TLS,
	}
	if (etag != "" && etag != entry.etag) || (lm != "" && lm != entry.lastModified) {
		c.refresh(resp304.Request, entry, h, etag, lm)
	}
	return &r.Response
}

// revalidatedResponse puts a response and its body in one allocation.
type revalidatedResponse struct {
	http.Response
	body bytesBody
}

// refresh replaces entry with a copy carrying the validators and fields of
// the 304 that revalidated it.
func (c *Cache) refresh(req *http.Request, entry *Entry, h http.Header, etag, lm string) {
	e := &Entry{
		key:          entry.key,
		body:         entry.body,
		etag:         entry.etag,
		lastModified: entry.lastModified,
		varyNames:    entry.varyNames,
		varyHash:     entry.varyHash,
		uncompressed: entry.uncompressed,
		storedAt:     c.now(),
	}
	e.setHeader(h)
	if etag != "" {
		e.etag = etag
	}
	if lm != "" {
		e.lastModified = lm
	}
	e.finish()
	ctx := context.Background()
	if req != nil {
		ctx = req.Context()
	}
	c.put(ctx, e, entry)
}

// Store keeps resp if it can serve later requests, and returns the
// response the caller should read, as usual.
//
// resp is kept when req is a GET without Range or Cache-Control: no-store
// (and, for owner "", without a credential header), and resp is a 200 with
// an ETag or Last-Modified, without Cache-Control: no-store, without
// Vary: *, and with a body of at most MaxEntryBytes. A 200 to a request the
// caller made conditional itself is kept too; only Prepare leaves such
// requests alone.
// Its body is then read whole (and the original closed); Store returns resp
// with a body replaying those bytes, ContentLength set and
// X-Ratekeeper-Cache: miss added. Request header fields are never stored.
//
// Any other response is returned untouched, and streaming is never broken:
// a body longer than MaxEntryBytes (announced, or found while reading at
// most MaxEntryBytes+1 bytes of an unknown length) is not stored, and the
// caller reads the bytes already read followed by the rest of the body.
// A 200 that cannot be stored also drops any entry stored for its key, as
// the server has a newer representation.
//
// The error is non-nil only when reading the body failed before the cache
// could decide; the body is then closed, the response is nil, and the
// error wraps the read error, as a failed round trip would be.
func (c *Cache) Store(req *http.Request, owner string, resp *http.Response) (*http.Response, error) {
	if c == nil || resp == nil || resp.Body == nil || resp.StatusCode != http.StatusOK || !c.usable(req, owner) {
		return resp, nil
	}
	etag, lm := resp.Header.Get("Etag"), resp.Header.Get("Last-Modified")
	if etag == "" && lm == "" && !isConditional(req.Header) {
		// Nothing to store, and no old entry to drop: Prepare found
		// none to revalidate (an old variant of another Vary is left
		// to be revalidated or evicted).
		return resp, nil
	}
	k := requestKey(req, owner)
	varyNames, star := parseVary(resp.Header["Vary"], c.credential)
	if (etag == "" && lm == "") || star || hasDirective(resp.Header["Cache-Control"], "no-store") ||
		resp.ContentLength > c.maxEntry {
		c.drop(req.Context(), k)
		return resp, nil
	}

	body, complete, err := readUpTo(resp.Body, resp.ContentLength, c.maxEntry)
	if err != nil {
		resp.Body.Close()
		return nil, fmt.Errorf("cache: reading the response body: %w", err)
	}
	if !complete {
		resp.Body = &replayBody{prefix: body, rest: resp.Body}
		c.drop(req.Context(), k)
		return resp, nil
	}
	resp.Body.Close()
	resp.Body = newBytesBody(body)
	resp.ContentLength = int64(len(body))

	e := &Entry{
		key:          k,
		body:         body,
		etag:         etag,
		lastModified: lm,
		varyNames:    varyNames,
		uncompressed: resp.Uncompressed,
		storedAt:     c.now(),
	}
	e.setHeader(resp.Header)
	if len(varyNames) > 0 {
		e.varyHash = varyKey(req, varyNames)
	}
	e.finish()
	if c.put(req.Context(), e, nil) {
		c.stores.Add(1)
		resp.Header.Set(HeaderName, Miss)
	}
	return resp, nil
}

// usable reports whether the cache may handle req for owner at all.
// Has reports whether Prepare would find a stored response for req as
// seen by owner, without touching req. The transport asks it to prefer,
// among credentials that can go equally soon, one whose owner can send a
// free conditional request.
func (c *Cache) Has(req *http.Request, owner string) bool {
	if c == nil || !c.usable(req, owner) || isConditional(req.Header) {
		return false
	}
	e := c.lookup(req.Context(), requestKey(req, owner))
	return e != nil && e.matches(req)
}

func (c *Cache) usable(req *http.Request, owner string) bool {
	if req == nil || req.URL == nil || (req.Method != http.MethodGet && req.Method != "") {
		return false
	}
	h := req.Header
	if _, ok := h["Range"]; ok || hasDirective(h["Cache-Control"], "no-store") {
		return false
	}
	if owner == "" {
		for _, name := range c.credential {
			if _, ok := h[name]; ok {
				return false
			}
		}
	}
	return true
}

// isConditional reports whether h carries a precondition the caller set.
func isConditional(h http.Header) bool {
	for _, name := range [...]string{"If-None-Match", "If-Modified-Since", "If-Match", "If-Unmodified-Since", "If-Range"} {
		if _, ok := h[name]; ok {
			return true
		}
	}
	return false
}

// lookup returns the entry stored under k, or nil.
func (c *Cache) lookup(ctx context.Context, k key) *Entry {
	if c.mem != nil {
		return c.mem.get(k)
	}
	bk := blobKey(k)
	blob, ok, err := c.backend.GetBlob(ctx, bk)
	if err != nil {
		c.fail("reading a cache entry", k, err)
		return nil
	}
	if !ok {
		return nil
	}
	e, err := decodeEntry(k, blob)
	if err != nil {
		c.fail("ignoring an unreadable cache entry", k, err)
		if err := c.backend.DeleteBlob(ctx, bk); err != nil {
			c.fail("deleting an unreadable cache entry", k, err)
		}
		return nil
	}
	return e
}

// put stores e, replacing what is under its key (only if that is still old,
// when old is non-nil and the store can tell), and reports whether it did.
func (c *Cache) put(ctx context.Context, e, old *Entry) bool {
	if c.mem != nil {
		return c.mem.put(e, old)
	}
	blob, err := encodeEntry(e)
	if err == nil {
		err = c.backend.PutBlob(ctx, blobKey(e.key), blob)
	}
	if err != nil {
		c.fail("storing a cache entry", e.key, err)
		return false
	}
	return true
}

// drop removes what is stored under k.
func (c *Cache) drop(ctx context.Context, k key) {
	if c.mem != nil {
		c.mem.delete(k)
		return
	}
	if err := c.backend.DeleteBlob(ctx, blobKey(k)); err != nil {
		c.fail("deleting a cache entry", k, err)
	}
}

// fail counts and logs a backend problem. The key appears as a short
// digest prefix: enough to find the blob, nothing about the request.
func (c *Cache) fail(msg string, k key, err error) {
	c.failures.Add(1)
	level := slog.LevelWarn
	if errors.Is(err, context.Canceled) {
		level = slog.LevelDebug
	}
	c.log.Log(context.Background(), level, "cache: "+msg, "key", hex.EncodeToString(k[:6]), "err", err)
}

// readUpTo reads r until EOF or until more than limit bytes have been read.
// size is the announced length, or -1. complete reports that the whole body
// (at most limit bytes) was read; otherwise b holds what was read (limit+1
// bytes) and the rest is still in r.
func readUpTo(r io.Reader, size, limit int64) (b []byte, complete bool, err error) {
	if size >= 0 {
		// One allocation with room to notice a body longer than announced.
		b = make([]byte, size, size+1)
		if _, err := io.ReadFull(r, b); err != nil {
			if err == io.EOF {
				err = io.ErrUnexpectedEOF
			}
			return nil, false, err
		}
		n, err := r.Read(b[size : size+1])
		switch {
		case n > 0:
			b = b[:size+1]
			if size+1 > limit {
				return b, false, nil
			}
			// Longer than announced: go on as for an unknown length.
		case err == io.EOF:
			return b, true, nil
		case err != nil:
			return nil, false, err
		default:
			// (0, nil): the reader has not said whether more follows.
		}
	}
	var buf bytes.Buffer
	buf.Write(b)
	_, err = buf.ReadFrom(io.LimitReader(r, limit+1-int64(len(b))))
	if err != nil {
		return nil, false, err
	}
	b = buf.Bytes()
	if int64(len(b)) > limit {
		return b, false, nil
	}
	if cap(b)-len(b) > len(b)/8 {
		b = bytes.Clone(b)
	}
	return b, true, nil
}

// bytesBody is a response body reading a byte slice; Close does nothing.
type bytesBody struct{ bytes.Reader }

func newBytesBody(b []byte) *bytesBody {
	r := &bytesBody{}
	r.Reset(b)
	return r
}

func (*bytesBody) Close() error { return nil }

// replayBody returns prefix, then the rest of the original body.
type replayBody struct {
	prefix []byte
	rest   io.ReadCloser
}

func (r *replayBody) Read(p []byte) (int, error) {
	if len(r.prefix) > 0 {
		n := copy(p, r.prefix)
		r.prefix = r.prefix[n:]
		return n, nil
	}
	return r.rest.Read(p)
}

func (r *replayBody) Close() error { return r.rest.Close() }
