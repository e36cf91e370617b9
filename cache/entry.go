package cache

import (
	"net/http"
	"slices"
	"strings"
	"time"
)

// Entry is one stored response: a 200 to a GET, its validators, what the
// request carried for the header fields the response varies on, and whose
// request stored it. An Entry never changes once built, so a handle
// returned by Prepare stays valid (and safe to share) even if the cache
// evicts or replaces it.
type Entry struct {
	key          key
	fields       []field // stored header fields, sorted by name
	nvalues      int     // values in fields
	body         []byte
	etag         string
	lastModified string
	inm, ims     []string // If-None-Match, If-Modified-Since values Prepare sets
	varyNames    []string // canonical, deduplicated, credential headers left out
	varyHash     key      // varyKey of the storing request over varyNames
	uncompressed bool     // the body was transparently decompressed by net/http
	storedAt     time.Time
	// requestTime and storedAt (the response time) are RFC 9111 §4.2.3's
	// request_time and response_time of the answer, or of the 304 that
	// last revalidated it, on the caller's clock: its age is computed
	// from them.
	requestTime time.Time
	size        int64

	// principal is who received the answer within its owner (see
	// WithPrincipal): a private answer is served without asking the
	// server only to the same owner and principal.
	principal party
	// credVary: the answer names a credential header in Vary, so it is
	// served without asking the server only to its owner's credentials.
	credVary bool
	// public: Cache-Control public, s-maxage or must-revalidate, which let
	// a shared cache serve an answer to a request that carried
	// credentials to others than its principal (RFC 9111 §3.5).
	public bool

	owner   party // the credential owner whose request stored it
	shared  bool  // any credential may revalidate it (see record)
	private bool  // the response said Cache-Control: private
	// ruled: the server's ETag was the one its TagRule gives for the
	// storing request, so Prepare sends the tag the rule gives for each
	// request instead of the stored one.
	ruled bool
}

// field is one stored header field.
type field struct {
	name   string
	values []string
}

// ETag returns the stored entity tag, or "" when the response had none.
func (e *Entry) ETag() string { return e.etag }

// LastModified returns the stored Last-Modified value, or "".
func (e *Entry) LastModified() string { return e.lastModified }

// StoredAt returns when the response was received (or last revalidated).
func (e *Entry) StoredAt() time.Time { return e.storedAt }

// stored returns what Evaluate needs of e: the fields freshness reads,
// and when the answer was asked for and came.
func (e *Entry) stored() Stored {
	h := make(http.Header, 4)
	for _, name := range [...]string{"Cache-Control", "Date", "Age", "Expires"} {
		if vs := e.values(name); vs != nil {
			h[name] = vs
		}
	}
	return Stored{Header: h, RequestTime: e.requestTime, ResponseTime: e.storedAt}
}

// values returns the stored values of the canonical field name (the
// entry's own: not to be modified), or nil.
func (e *Entry) values(name string) []string {
	i, ok := slices.BinarySearchFunc(e.fields, name, func(f field, n string) int { return strings.Compare(f.name, n) })
	if !ok {
		return nil
	}
	return e.fields[i].values
}

// Size returns the approximate bytes the entry holds (body, header fields
// and bookkeeping); the memory LRU bounds the sum of these.
func (e *Entry) Size() int64 { return e.size }

// Header returns a copy of the stored header fields.
func (e *Entry) Header() http.Header {
	h := make(http.Header, len(e.fields))
	for _, f := range e.fields {
		h[f.name] = slices.Clone(f.values)
	}
	return h
}

// matches reports whether req carries the same values for the entry's Vary
// fields as the request that stored it.
func (e *Entry) matches(req *http.Request) bool {
	return len(e.varyNames) == 0 || varyKey(req, e.varyNames) == e.varyHash
}

// entryOverhead approximates the bytes an Entry and its bookkeeping take
// beyond body and header text.
const entryOverhead = 256

// setHeader keeps the fields of h a cache stores: all but the hop-by-hop
// fields (RFC 9110 §7.6.1, including those Connection names), Set-Cookie
// (state meant for one response, and possibly a session credential) and
// the marker header. The values are copied into one backing array.
func (e *Entry) setHeader(h http.Header) {
	conn := h["Connection"]
	nf, nv := 0, 0
	for k, vs := range h {
		if keepStored(k, conn) {
			nf++
			nv += len(vs)
		}
	}
	vals := make([]string, 0, nv)
	e.fields = make([]field, 0, nf)
	for k, vs := range h {
		if !keepStored(k, conn) {
			continue
		}
		start := len(vals)
		vals = append(vals, vs...)
		e.fields = append(e.fields, field{k, vals[start:len(vals):len(vals)]})
	}
	e.nvalues = nv
	slices.SortFunc(e.fields, func(a, b field) int { return strings.Compare(a.name, b.name) })
}

// finish derives the validator values Prepare sets and the approximate
// size from the body, header fields and strings the entry holds.
func (e *Entry) finish() {
	validators := make([]string, 0, 2)
	e.inm, e.ims = nil, nil
	if e.etag != "" {
		validators = append(validators, e.etag)
		e.inm = validators[0:1:1]
	}
	if e.lastModified != "" {
		validators = append(validators, e.lastModified)
		e.ims = validators[len(validators)-1 : len(validators) : len(validators)]
	}
	n := int64(entryOverhead + len(e.body) + len(e.etag) + len(e.lastModified))
	for _, f := range e.fields {
		n += int64(len(f.name)) + 40 // field and slice headers
		for _, v := range f.values {
			n += int64(len(v)) + 16
		}
	}
	for _, name := range e.varyNames {
		n += int64(len(name)) + 16
	}
	e.size = n
}

func keepStored(name string, connection []string) bool {
	switch name {
	case "Connection", "Keep-Alive", "Proxy-Connection", "Te", "Trailer",
		"Transfer-Encoding", "Upgrade", "Set-Cookie", HeaderName:
		return false
	}
	for _, v := range connection {
		for v != "" {
			var tok string
			tok, v, _ = strings.Cut(v, ",")
			if strings.EqualFold(strings.TrimSpace(tok), name) {
				return false
			}
		}
	}
	return true
}

// updatable reports whether a field of a 304 replaces the stored one when
// the 304 is turned into the stored 200 (RFC 9111 §3.2 and §4.3.4): every
// field does except those describing the stored body's framing and
// encoding, which the 304 has no body to describe, hop-by-hop fields, and
// the marker header, which Revalidated sets itself.
func updatable(name string) bool {
	switch name {
	case "Content-Length", "Content-Encoding", "Content-Range", "Transfer-Encoding",
		"Connection", "Keep-Alive", "Proxy-Connection", "Te", "Trailer", "Upgrade",
		HeaderName:
		return false
	}
	return true
}

// mergeInto turns h, the header of a 304 answering e's validators, into
// the header of the stored 200 (RFC 9111 §4.3.4): each updatable field of
// the 304 replaces the stored one, the stored fields fill in the rest, and
// the marker header is set to value. It reuses h's map, which the 304
// response hands over, and copies the stored values it adds (one backing
// array, each slice clipped), so a caller editing the result cannot reach
// the stored entry.
func mergeInto(h http.Header, e *Entry, value string) http.Header {
	if h == nil {
		h = make(http.Header, len(e.fields)+1)
	}
	for k := range h {
		if !updatable(k) {
			delete(h, k)
		}
	}
	vals := make([]string, 0, e.nvalues+1)
	for _, f := range e.fields {
		if _, fresh := h[f.name]; fresh {
			continue
		}
		start := len(vals)
		vals = append(vals, f.values...)
		h[f.name] = vals[start:len(vals):len(vals)]
	}
	vals = append(vals, value)
	h[HeaderName] = vals[len(vals)-1:]
	return h
}

// parseVary parses a response's Vary field values into canonical,
// deduplicated names, leaving out the credential headers. star reports
// "Vary: *", which makes a response unusable for any later request.
//
// A response that varies on Authorization (GitHub's all do) says that
// another credential may get another representation. Matching on the
// token would keep every answer to its token; instead the cache lets the
// server match: a stored answer is only ever used after a 304 to the
// request of the credential asking now, carrying the stored ETag, and the
// server answers 304 only when the representation it selects for this
// credential has that ETag (RFC 9110 §13.1.2; RFC 9111 §4.3.2 selects a
// stored response by the validator a 304 confirms in the same way). The
// stored body is then this credential's representation, byte for byte up
// to the server's weak comparison. A credential that cannot see the
// resource gets its 403 or 404, not the stored body. Tokens are thus never
// hashed or stored, and the owner passed to Prepare only decides which
// validators may go (see record).
func parseVary(values []string, credential []string) (names []string, star bool) {
	for _, v := range values {
		for v != "" {
			var tok string
			tok, v, _ = strings.Cut(v, ",")
			tok = strings.TrimSpace(tok)
			switch {
			case tok == "":
				continue
			case tok == "*":
				return nil, true
			}
			name := http.CanonicalHeaderKey(tok)
			if slices.Contains(credential, name) || slices.Contains(names, name) {
				continue
			}
			if names == nil {
				names = make([]string, 0, 8)
			}
			names = append(names, name)
		}
	}
	slices.Sort(names)
	return slices.Clip(names), false
}
