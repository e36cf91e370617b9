package cache

import (
	"bytes"
	"context"
	"fmt"
	"io"
	"log/slog"
	"net/http"
	"slices"
	"strconv"
	"strings"
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
	// Fresh marks a stored answer served without asking the server,
	// because it was fresh (see Evaluate).
	Fresh = "fresh"
	// Stale marks a stale stored answer served without asking the server,
	// because the request's max-stale accepted it and asking would have
	// waited for quota.
	Stale = "stale"
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
	// header fields and bookkeeping); 0 or less means DefaultMaxBytes. With
	// a Backend, which bounds its own size, a quarter of it bounds the
	// memory front that keeps recently used entries of the backend.
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
	// on, hashed or stored, even when a response varies on them: the
	// server's 304 to each credential's own request decides instead.
	CredentialHeaders []string
	// Logger receives warnings about backend errors and corrupted blobs;
	// nil discards them. Messages carry a short key digest, never a URL,
	// owner or token.
	Logger *slog.Logger
	// Now stamps Entry.StoredAt for Store and Revalidated, which are not
	// told when the answer came; nil means time.Now.
	Now func() time.Time
	// AlwaysRevalidate turns freshness off: Lookup finds nothing, so
	// every use of a stored answer is a conditional request.
	AlwaysRevalidate bool
}

// Cache stores responses to GET requests with their validators and turns
// the server's 304s back into those responses. It is safe for concurrent
// use. A nil *Cache is a disabled cache: Prepare returns nil, Store returns
// the response untouched.
type Cache struct {
	*core
	// privatePerOwner: answers marked Cache-Control: private are revalidated
	// by their owner only (see PrivatePerOwner).
	privatePerOwner bool
	// rule is how the server computes its entity tags; nil: unknown (see
	// WithTagRule).
	rule TagRule
	// shared: the cache serves several parties (see Shared).
	shared bool
}

// core is what the views of one cache share: the entries and the counters.
type core struct {
	maxEntry   int64
	maxRecord  int64 // bound on all variants of one URL together
	mem        *lru  // the entries; nil when backend is set
	backend    Backend
	front      *lru     // recently used backend records; nil without a backend
	credential []string // canonical credential header names
	log        *slog.Logger
	now        func() time.Time
	// revalidateAll: Options.AlwaysRevalidate.
	revalidateAll bool

	hits, misses, revalidations, stores, failures atomic.Uint64
	freshHits, staleHits                          atomic.Uint64
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
	c := &core{
		maxEntry:      opts.MaxEntryBytes,
		maxRecord:     2 * opts.MaxEntryBytes,
		backend:       opts.Backend,
		credential:    slices.Clone(defaultCredentialHeaders),
		log:           opts.Logger,
		now:           opts.Now,
		revalidateAll: opts.AlwaysRevalidate,
	}
	for _, h := range opts.CredentialHeaders {
		if h = http.CanonicalHeaderKey(h); h != "" && !slices.Contains(c.credential, h) {
			c.credential = append(c.credential, h)
		}
	}
	if c.backend == nil {
		c.mem = newLRU(opts.MaxBytes)
		c.maxRecord = min(c.maxRecord, opts.MaxBytes)
	} else {
		c.front = newLRU(opts.MaxBytes / 4)
	}
	return &Cache{core: c}
}

// PrivatePerOwner returns a view of c, sharing its entries and counters,
// for requests made with the credentials of parties who must not see each
// other's private answers, such as a gateway's clients sending their own
// tokens. Through it, an answer marked Cache-Control: private is stored
// for its owner alone and revalidated only with that owner's credentials,
// and private answers stored through c (by other owners) are not used;
// public answers are shared as through c. The view's Stats are c's.
//
// Serving another owner's private answer after the server's 304 would be
// correct for the body (the 304 says this credential's representation is
// the stored one), but the stored header fields the 304 does not repeat
// describe the request that stored it (GitHub's X-OAuth-Scopes and token
// expiry, for instance), and RFC 9111 §5.2.2.7 forbids a shared cache to
// keep private answers at all. Among one operator's own credentials the
// cache is that operator's private cache, and c shares them.
func (c *Cache) PrivatePerOwner() *Cache {
	if c == nil {
		return nil
	}
	return &Cache{core: c.core, privatePerOwner: true, rule: c.rule, shared: c.shared}
}

// Shared returns a view of c, sharing its entries and counters, that acts
// as a shared cache (RFC 9111 §3.5, §4.2.1): a gateway's, serving several
// clients. Through it, Lookup takes an answer's s-maxage over its
// max-age, honours proxy-revalidate, and serves an answer marked private,
// or one to a request with credentials that is not public (public,
// s-maxage or must-revalidate), only to the principal that received it
// (WithPrincipal) and the same owner. Public answers are served to every
// principal whose credentials' owner may use them.
func (c *Cache) Shared() *Cache {
	if c == nil {
		return nil
	}
	return &Cache{core: c.core, privatePerOwner: c.privatePerOwner, rule: c.rule, shared: true}
}

// principalKey is the context key of WithPrincipal.
type principalKey struct{}

// WithPrincipal returns ctx naming the party a request is made for, within
// its credential's owner: a gateway's client key, say. An answer is stored
// with the principal of the request that got it, and an answer marked
// private is served without asking the server only to a request of the
// same principal and owner. Without it, the principal is the process
// (its operator), as in a private cache.
func WithPrincipal(ctx context.Context, principal string) context.Context {
	return context.WithValue(ctx, principalKey{}, principal)
}

// principalOf returns the digest of ctx's principal.
func principalOf(ctx context.Context) party {
	p, _ := ctx.Value(principalKey{}).(string)
	if p == "" {
		return party{}
	}
	return partyOf("principal\x00" + p)
}

// TagRule is how a server computes the entity tags of its answers, where
// that is known (package provider knows GitHub's).
type TagRule interface {
	// EntityTag returns the tag the server gives an answer whose body is
	// body to a request carrying header h; ok is false when there is no
	// rule to apply.
	EntityTag(h http.Header, body []byte) (tag string, ok bool)
}

// WithTagRule returns a view of c, sharing its entries and counters (and
// its PrivatePerOwner setting), for requests to a server whose entity
// tags follow rule.
//
// A server that mixes the request into its tags (GitHub hashes the Accept,
// Authorization and Cookie values with the body) answers a stored tag sent
// with another credential with the full answer: the tag it would give that
// credential is another. Through the view, Store checks each answer's tag
// against the rule for the request that fetched it, and Prepare then sends
// the tag the rule gives for the request being prepared and the stored
// body, so a repeat with any credential — a rotated token too — gets the
// free 304 when the representation is unchanged. An answer whose tag the
// rule does not give (the server changed its rule, or the answer passed
// through something that changed it) is kept and revalidated as without a
// rule, with its stored tag: never worse than without the view. A nil rule
// returns c.
func (c *Cache) WithTagRule(rule TagRule) *Cache {
	if c == nil || rule == nil {
		return c
	}
	return &Cache{core: c.core, privatePerOwner: c.privatePerOwner, rule: rule, shared: c.shared}
}

// Stats counts what a Cache has done since New.
type Stats struct {
	// Entries and Bytes describe what is held in memory: the responses in
	// the memory LRU, or with a Backend in its memory front, and their
	// approximate total size. The responses stored for one URL (see
	// Prepare) count one each.
	Entries int
	Bytes   int64
	// Hits counts 304s turned into stored 200s by Revalidated.
	Hits uint64
	// FreshHits counts stored answers served fresh without asking the
	// server, and StaleHits stale ones a request's max-stale accepted
	// (see Serve).
	FreshHits, StaleHits uint64
	// Misses counts Prepare calls on a cacheable request that found no
	// usable entry (none stored, or one for other Vary values).
	Misses uint64
	// Revalidations counts Prepare calls that found an entry and set
	// validators; those not followed by a hit got a new response instead.
	Revalidations uint64
	// Stores counts responses stored.
	Stores uint64
	// Evictions counts records (a URL's responses) the memory LRU or front
	// dropped to stay within its bound.
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
		FreshHits:     c.freshHits.Load(),
		StaleHits:     c.staleHits.Load(),
		Misses:        c.misses.Load(),
		Revalidations: c.revalidations.Load(),
		Stores:        c.stores.Load(),
		Errors:        c.failures.Load(),
	}
	if m := c.memory(); m != nil {
		s.Entries, s.Bytes, s.Evictions = m.stats()
	}
	return s
}

// Prepare looks up a stored response for req as seen by owner, the
// credential owner the request is sent as ("" for anonymous), and when
// there is one adds its validators to req. It returns the entry to give
// Revalidated if the server answers 304, or nil when there is nothing to
// revalidate.
//
// A stored response is found when req is a GET for the same canonical URL
// with the same Accept values, and carries the same values as the storing
// request for every header the stored response named in Vary (credential
// headers excepted: the server decides for them, see below). Whose
// credential stored it matters only for which validators go:
//
//   - the owner's own answer: If-None-Match with its ETag and
//     If-Modified-Since with its Last-Modified, whichever it had;
//   - another owner's answer, when it has an ETag: If-None-Match alone.
//     The server answers 304 only if the representation it would send to
//     this credential has that ETag, and 403 or 404 to a credential that
//     may not see the resource, so the stored body is only ever returned
//     after the server confirmed it for the credential that asked. A
//     Last-Modified date confirms no such thing and goes only with its
//     owner's requests.
//
// Through a WithTagRule view, If-None-Match carries the tag the server's
// rule gives req for the stored body, when the stored answer's own tag
// followed the rule; otherwise the stored tag.
//
// Through a PrivatePerOwner view, answers marked Cache-Control: private
// are used by their owner only.
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
	var e *Entry
	var o party
	if r := c.lookup(req.Context(), requestKey(req)); r != nil {
		o = partyOf(owner)
		e = r.pick(req, o, c.privatePerOwner)
	}
	if e == nil {
		c.misses.Add(1)
		return nil
	}
	if req.Header == nil {
		req.Header = make(http.Header, 2)
	}
	// The value slices are the entry's own (capacity 1, so an Add makes a
	// new one): setting them allocates nothing.
	if e.inm != nil {
		req.Header["If-None-Match"] = c.validator(req.Header, e)
	}
	if e.ims != nil && e.owner == o {
		req.Header["If-Modified-Since"] = e.ims
	}
	c.revalidations.Add(1)
	return e
}

// Hit is a stored answer a request may use without asking the server
// (see Lookup and Serve).
type Hit struct {
	entry *Entry
	// Owner is the owner, among those given to Lookup, whose answer it
	// is; "" for an answer any owner may use.
	Owner string
	Freshness
}

// Lookup returns the stored answer req may use at now without asking the
// server, if any: one whose Vary fields req matches, that the request may
// see (below), and that Evaluate finds ServeFresh, or ServeStale by the
// request's max-stale (a fresh one is preferred, then the youngest).
// owners are the credential owners the request may be sent as (a
// transport's pool): the request sees
//
//   - an answer stored for one of owners, unless it must stay with its
//     principal (it is marked private, or through a Shared view is not
//     public) and req's principal (WithPrincipal) is another;
//   - an answer stored for another owner only when it is neither private
//     nor varies on a credential header (Vary: Authorization), and
//     through a Shared view is public.
//
// It finds nothing with Options.AlwaysRevalidate, for a request that
// Prepare would leave alone (not a GET, Range, no-store, conditional), or
// through a PrivatePerOwner view for another owner's private answer.
// Lookup counts nothing; Serve counts the hit.
func (c *Cache) Lookup(req *http.Request, owners []string, now time.Time) (Hit, bool) {
	if c == nil || c.revalidateAll || !c.usable(req, "any") || isConditional(req.Header) {
		return Hit{}, false
	}
	r := c.lookup(req.Context(), requestKey(req))
	if r == nil || r.absent() {
		return Hit{}, false
	}
	var parties [4]party
	ps := parties[:0]
	for _, o := range owners {
		ps = append(ps, partyOf(o))
	}
	pr := principalOf(req.Context())
	var best Hit
	found := false
	for _, v := range r.variants {
		if !v.matches(req) {
			continue
		}
		owner, ok := c.sees(v, owners, ps, pr)
		if !ok {
			continue
		}
		f := Evaluate(v.stored(), req.Header, now, c.shared && !v.private)
		if f.Use == MustRevalidate {
			continue
		}
		if !found || (f.Use == ServeFresh && best.Use != ServeFresh) || (f.Use == best.Use && f.Age < best.Age) {
			best, found = Hit{entry: v, Owner: owner, Freshness: f}, true
		}
	}
	return best, found
}

// Collapsible returns, for a request whose answer Lookup could serve to
// identical requests that come while it is in flight, the key that
// identifies them (the URL, Accept values and principal, as a digest);
// ok is false for any other request: one Lookup leaves alone, one whose
// caller asks for validation (no-cache), or any with
// Options.AlwaysRevalidate. A transport lets the first of such requests
// go and the others wait for its answer, then look again (RFC 9111 §4
// allows a cache to collapse requests): a URL read by many workers at
// once costs one request, not one each.
func (c *Cache) Collapsible(req *http.Request) (key string, ok bool) {
	if c == nil || c.revalidateAll || !c.usable(req, "any") || isConditional(req.Header) {
		return "", false
	}
	cc := req.Header["Cache-Control"]
	if hasDirective(cc, "no-cache") || (len(cc) == 0 && hasDirective(req.Header["Pragma"], "no-cache")) {
		return "", false
	}
	k := requestKey(req)
	p := principalOf(req.Context())
	return string(k[:]) + string(p[:]), true
}

// sees reports whether a request sent as one of owners (ps their
// parties) for principal pr may use v without asking the server, and
// as which owner ("" for any).
func (c *Cache) sees(v *Entry, owners []string, ps []party, pr party) (string, bool) {
	bound := v.private || (c.shared && !v.public)
	for i, p := range ps {
		if p == v.owner {
			return owners[i], !bound || v.principal == pr
		}
	}
	return "", !bound && !v.credVary
}

// Serve returns the response Lookup's hit h gives req: the stored status,
// header fields and body, with Age set to the answer's current age in
// whole seconds (RFC 9111 §5.1) and X-Ratekeeper-Cache: fresh, or stale
// for a stale answer the request's max-stale accepted. No Warning field
// is added (RFC 9111 obsoletes it). The response's Request is req.
func (c *Cache) Serve(req *http.Request, h Hit) *http.Response {
	e := h.entry
	marker := Fresh
	if h.Use == ServeStale {
		marker = Stale
		c.staleHits.Add(1)
	} else {
		c.freshHits.Add(1)
	}
	hdr := make(http.Header, len(e.fields)+2)
	vals := make([]string, 0, e.nvalues+2)
	for _, f := range e.fields {
		if f.name == "Age" {
			continue
		}
		start := len(vals)
		vals = append(vals, f.values...)
		hdr[f.name] = vals[start:len(vals):len(vals)]
	}
	vals = append(vals, strconv.FormatInt(int64(h.Age/time.Second), 10), marker)
	hdr["Age"] = vals[len(vals)-2 : len(vals)-1 : len(vals)-1]
	hdr[HeaderName] = vals[len(vals)-1:]
	return &http.Response{
		Status:        "200 OK",
		StatusCode:    http.StatusOK,
		Proto:         "HTTP/1.1",
		ProtoMajor:    1,
		ProtoMinor:    1,
		Header:        hdr,
		Body:          newBytesBody(e.body),
		ContentLength: int64(len(e.body)),
		Uncompressed:  e.uncompressed,
		Request:       req,
	}
}

// Holds reports whether owner has an answer of its own stored for req,
// looking only at this process's memory (never the backend). The transport
// prefers, among credentials that can go equally soon, one whose owner
// does: a server whose validators differ per credential (GitHub's ETags
// differ per token) answers another owner's validator with a full answer,
// and only the owner's own with a free 304.
func (c *Cache) Holds(req *http.Request, owner string) bool {
	if c == nil || !c.usable(req, owner) || isConditional(req.Header) {
		return false
	}
	r := c.memory().get(requestKey(req))
	if r == nil {
		return false
	}
	o := partyOf(owner)
	for _, v := range r.variants {
		if v.owner == o && v.matches(req) {
			return true
		}
	}
	return false
}

// Revalidatable reports whether req is likely to go as a conditional
// request whose answer may be a free 304: a GET the caller made
// conditional itself (If-None-Match or If-Modified-Since), or one for
// which this process's memory holds an answer with a validator (any
// owner's: the transport may compute another token's tag from it). It
// never reads the backend. The transport lets such a request go while
// the server's own count has room, without holding quota a counted
// request needs; the answer then says what it cost.
func (c *Cache) Revalidatable(req *http.Request) bool {
	if req == nil || req.URL == nil || (req.Method != http.MethodGet && req.Method != "") {
		return false
	}
	if _, ok := req.Header["If-None-Match"]; ok {
		return true
	}
	if _, ok := req.Header["If-Modified-Since"]; ok {
		return true
	}
	if c == nil || !c.usable(req, "any") || isConditional(req.Header) {
		return false
	}
	r := c.memory().get(requestKey(req))
	if r == nil {
		return false
	}
	for _, v := range r.variants {
		if (v.inm != nil || v.ims != nil) && v.matches(req) {
			return true
		}
	}
	return false
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
	if c == nil {
		return resp304
	}
	now := c.now()
	return c.RevalidatedAt(entry, resp304, now, now)
}

// RevalidatedAt is Revalidated for a 304 to a request sent at sent and
// answered at received, on the caller's clock: the stored answer is then
// as fresh as a new one received at that moment (its age counts from the
// 304's Date and the round trip), and the stored entry is updated with
// the 304's fields when they give it a freshness lifetime (or new
// validators).
func (c *Cache) RevalidatedAt(entry *Entry, resp304 *http.Response, sent, received time.Time) *http.Response {
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
	confirmed := confirmsSent(entry, resp304.Request, etag)
	if confirmed {
		// The 304 names the tag computed for this credential; the
		// caller gets the stored tag, one per representation, so its own
		// conditional requests find the stored answer (see BodyTagged).
		h["Etag"] = []string{entry.etag}
	}
	changed := (etag != "" && etag != entry.etag && !confirmed) || (lm != "" && lm != entry.lastModified)
	if confirmed {
		etag = ""
	}
	if changed || c.freshFor(h, entry) {
		c.refresh(resp304.Request, entry, h, etag, lm, sent, received)
	}
	return &r.Response
}

// freshFor reports whether an answer with header h (the stored entry's
// fields refreshed by a 304) has a freshness lifetime worth recording:
// otherwise a revalidation rewrites nothing, as every use asks the server
// anyway.
func (c *Cache) freshFor(h http.Header, e *Entry) bool {
	if c.revalidateAll {
		return false
	}
	d := parseDirectives(h["Cache-Control"])
	return !d.has("no-cache") && lifetime(h, d, c.shared && !e.private) > 0
}

// revalidatedResponse puts a response and its body in one allocation.
type revalidatedResponse struct {
	http.Response
	body bytesBody
}

// refresh replaces entry, if it is still stored, with a copy carrying the
// validators and fields of the 304 that revalidated it.
func (c *Cache) refresh(req *http.Request, entry *Entry, h http.Header, etag, lm string, sent, received time.Time) {
	e := &Entry{
		key:          entry.key,
		body:         entry.body,
		etag:         entry.etag,
		lastModified: entry.lastModified,
		varyNames:    entry.varyNames,
		varyHash:     entry.varyHash,
		uncompressed: entry.uncompressed,
		storedAt:     received,
		requestTime:  sent,
		owner:        entry.owner,
		principal:    entry.principal,
		credVary:     entry.credVary,
		public:       entry.public,
		shared:       entry.shared,
		private:      entry.private,
		ruled:        entry.ruled,
	}
	if req != nil {
		// The principal that revalidated it received it now.
		e.principal = principalOf(req.Context())
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
	c.update(ctx, entry.key, func(r *record) *record { return r.refreshed(entry, e) })
}

// Store keeps resp if it can serve later requests, and returns the
// response the caller should read, as usual. owner is the credential owner
// the request was sent as, as for Prepare.
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
// An answer with an ETag is shared: any credential's request for the URL
// may revalidate it (see Prepare), except one marked Cache-Control:
// private stored through a PrivatePerOwner view. Other answers are kept
// for owner alone. Each owner has at most one answer per URL; the record
// of a URL keeps those of up to 8 owners (see record for how a new shared
// answer and an older one of another owner coexist).
//
// Any other response is returned untouched, and streaming is never broken:
// a body longer than MaxEntryBytes (announced, or found while reading at
// most MaxEntryBytes+1 bytes of an unknown length) is not stored, and the
// caller reads the bytes already read followed by the rest of the body.
// A 200 that cannot be stored also drops what owner had stored for its
// URL, as the server has a newer representation.
//
// The error is non-nil only when reading the body failed before the cache
// could decide; the body is then closed, the response is nil, and the
// error wraps the read error, as a failed round trip would be.
func (c *Cache) Store(req *http.Request, owner string, resp *http.Response) (*http.Response, error) {
	if c == nil {
		return resp, nil
	}
	now := c.now()
	return c.StoreAt(req, owner, resp, now, now)
}

// StoreAt is Store for a request sent at sent and answered at received,
// on the caller's clock: the stored answer's age counts from them (RFC
// 9111 §4.2.3), and it is stored for req's principal (WithPrincipal).
func (c *Cache) StoreAt(req *http.Request, owner string, resp *http.Response, sent, received time.Time) (*http.Response, error) {
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
	k := requestKey(req)
	o := partyOf(owner)
	varyNames, star := parseVary(resp.Header["Vary"], c.credential)
	if (etag == "" && lm == "") || star || hasDirective(resp.Header["Cache-Control"], "no-store") ||
		resp.ContentLength > c.maxEntry {
		c.forget(req.Context(), k, o)
		return resp, nil
	}

	body, complete, err := readUpTo(resp.Body, resp.ContentLength, c.maxEntry)
	if err != nil {
		resp.Body.Close()
		return nil, fmt.Errorf("cache: reading the response body: %w", err)
	}
	if !complete {
		resp.Body = &replayBody{prefix: body, rest: resp.Body}
		c.forget(req.Context(), k, o)
		return resp, nil
	}
	resp.Body.Close()
	resp.Body = newBytesBody(body)
	resp.ContentLength = int64(len(body))

	cc := parseDirectives(resp.Header["Cache-Control"])
	private := cc.has("private")
	e := &Entry{
		key:          k,
		body:         body,
		etag:         etag,
		lastModified: lm,
		varyNames:    varyNames,
		uncompressed: resp.Uncompressed,
		storedAt:     received,
		requestTime:  sent,
		owner:        o,
		principal:    principalOf(req.Context()),
		credVary:     variesOn(resp.Header["Vary"], c.credential),
		public:       cc.has("public") || cc.has("s-maxage") || cc.has("must-revalidate"),
		shared:       etag != "" && !(private && c.privatePerOwner),
		private:      private,
		ruled:        c.follows(req.Header, body, etag),
	}
	e.setHeader(resp.Header)
	if len(varyNames) > 0 {
		e.varyHash = varyKey(req, varyNames)
	}
	e.finish()
	if c.update(req.Context(), k, func(r *record) *record { return r.with(e, c.maxRecord) }) {
		c.stores.Add(1)
		resp.Header.Set(HeaderName, Miss)
	}
	return resp, nil
}

// BodyTagged returns the body of an answer stored for req whose entity tag
// is etag (compared the weak way) and whose Vary fields req matches, or
// nil. The bytes are the cache's own and must not be modified.
//
// It serves a request its caller made conditional with a tag it got from
// this cache: with a server whose tags depend on the credential (see
// WithTagRule), the tag the server gives the credential now sent is
// computed from that body (see the transport).
func (c *Cache) BodyTagged(req *http.Request, etag string) []byte {
	if c == nil || etag == "" || req == nil || req.URL == nil || (req.Method != http.MethodGet && req.Method != "") {
		return nil
	}
	r := c.lookup(req.Context(), requestKey(req))
	if r == nil {
		return nil
	}
	for _, v := range r.variants {
		if sameETag(v.etag, etag) && v.matches(req) {
			return v.body
		}
	}
	return nil
}

// heldKey is the context key of WithHeldBody.
type heldKey struct{}

// WithHeldBody returns ctx carrying body: the answer the caller of a
// request keeps itself (a previous run's output) for the tag it sends in
// If-None-Match. A rate-keeping transport computes from it the tag a
// server whose tags depend on the credential gives the credential it
// sends (see WithTagRule), and adds it to the caller's. body must be the
// bytes the server sent.
func WithHeldBody(ctx context.Context, body []byte) context.Context {
	return context.WithValue(ctx, heldKey{}, body)
}

// HeldBody returns the body WithHeldBody put in ctx, or nil.
func HeldBody(ctx context.Context) []byte {
	b, _ := ctx.Value(heldKey{}).([]byte)
	return b
}

// validator is the If-None-Match value for a request with header h
// revalidating e: the tag the server's rule gives this request for e's
// body when e's tag followed the rule, else e's stored tag.
func (c *Cache) validator(h http.Header, e *Entry) []string {
	if e.ruled && c.rule != nil {
		if tag, ok := c.rule.EntityTag(h, e.body); ok {
			return []string{tag}
		}
	}
	return e.inm
}

// follows reports whether etag, the tag of an answer whose body is body
// to a request with header h, is the one the server's rule gives.
func (c *Cache) follows(h http.Header, body []byte, etag string) bool {
	if c.rule == nil || etag == "" {
		return false
	}
	tag, ok := c.rule.EntityTag(h, body)
	return ok && sameETag(tag, etag)
}

// confirmsSent reports whether a 304's tag is the one a ruled entry's
// validator sent (the tag for this request's credential, not the stored
// one): the entry is as it was, and rewriting it for every credential
// would be a write per repeat.
func confirmsSent(e *Entry, req *http.Request, etag string) bool {
	return e.ruled && req != nil && sameETag(req.Header.Get("If-None-Match"), etag)
}

// forget drops what owner o stored under k.
func (c *Cache) forget(ctx context.Context, k key, o party) {
	c.update(ctx, k, func(r *record) *record { return r.without(o) })
}

// usable reports whether the cache may handle req for owner at all.
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

// variesOn reports whether Vary field values name one of names
// (canonical) or "*".
func variesOn(values []string, names []string) bool {
	for _, v := range values {
		for v != "" {
			var tok string
			tok, v, _ = strings.Cut(v, ",")
			tok = strings.TrimSpace(tok)
			if tok == "*" || (tok != "" && slices.Contains(names, http.CanonicalHeaderKey(tok))) {
				return true
			}
		}
	}
	return false
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
