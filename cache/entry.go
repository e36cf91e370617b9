package cache

import (
	"net/http"
	"slices"
	"strings"
	"time"
)

// Entry is one stored response: a 200 to a GET, its validators, and what
// the request carried for the header fields the response varies on. An
// Entry never changes once built, so a handle returned by Prepare stays
// valid (and safe to share) even if the cache evicts or replaces it.
type Entry struct {
	key          key
	status       int
	header       http.Header // stored fields only; each value slice clipped
	body         []byte
	etag         string
	lastModified string
	varyNames    []string // canonical, deduplicated, credential headers left out
	varyHash     key      // varyKey of the storing request over varyNames
	uncompressed bool     // the body was transparently decompressed by net/http
	storedAt     time.Time
	size         int64

	// LRU links, guarded by the memory LRU's mutex.
	prev, next *Entry
}

// ETag returns the stored entity tag, or "" when the response had none.
func (e *Entry) ETag() string { return e.etag }

// LastModified returns the stored Last-Modified value, or "".
func (e *Entry) LastModified() string { return e.lastModified }

// StoredAt returns when the response was stored, by Options.Now.
func (e *Entry) StoredAt() time.Time { return e.storedAt }

// Size returns the approximate bytes the entry holds (body, header fields
// and bookkeeping); the memory LRU bounds the sum of these.
func (e *Entry) Size() int64 { return e.size }

// matches reports whether req carries the same values for the entry's Vary
// fields as the request that stored it.
func (e *Entry) matches(req *http.Request) bool {
	return len(e.varyNames) == 0 || varyKey(req, e.varyNames) == e.varyHash
}

// entryOverhead approximates the bytes an Entry and its bookkeeping take
// beyond body and header text.
const entryOverhead = 256

// computeSize sets e.size from the body, header fields and strings it holds.
func (e *Entry) computeSize() {
	n := int64(entryOverhead + len(e.body) + len(e.etag) + len(e.lastModified))
	for k, vs := range e.header {
		n += int64(len(k)) + 48 // map slot and slice header
		for _, v := range vs {
			n += int64(len(v)) + 16
		}
	}
	for _, name := range e.varyNames {
		n += int64(len(name)) + 16
	}
	e.size = n
}

// storedHeader copies the fields of h a cache keeps: all but the hop-by-hop
// fields (RFC 9110 §7.6.1, including those Connection names), Set-Cookie
// (state meant for one response, and possibly a session credential) and
// the marker header. All values share one backing array, each clipped so an
// append by a caller cannot write into its neighbour.
func storedHeader(h http.Header) http.Header {
	conn := h["Connection"]
	n := 0
	for k, vs := range h {
		if keepStored(k, conn) {
			n += len(vs)
		}
	}
	vals := make([]string, 0, n)
	out := make(http.Header, len(h))
	for k, vs := range h {
		if !keepStored(k, conn) {
			continue
		}
		start := len(vals)
		vals = append(vals, vs...)
		out[k] = vals[start:len(vals):len(vals)]
	}
	return out
}

func keepStored(name string, connection []string) bool {
	switch name {
	case "Connection", "Keep-Alive", "Proxy-Connection", "Te", "Trailer",
		"Transfer-Encoding", "Upgrade", "Set-Cookie", HeaderName:
		return false
	}
	for _, v := range connection {
		for _, tok := range strings.Split(v, ",") {
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

// mergedHeader returns the stored fields updated from a 304's fields, plus
// the marker header set to value. The result owns its value slices (one
// shared backing array, each slice clipped), so a caller editing it cannot
// reach the stored entry.
func mergedHeader(stored, fresh http.Header, value string) http.Header {
	n := 1
	for k, vs := range stored {
		if _, replaced := fresh[k]; !replaced || !updatable(k) {
			n += len(vs)
		}
	}
	for k, vs := range fresh {
		if updatable(k) {
			n += len(vs)
		}
	}
	vals := make([]string, 0, n)
	out := make(http.Header, len(stored)+len(fresh)+1)
	for k, vs := range stored {
		if _, replaced := fresh[k]; replaced && updatable(k) {
			continue
		}
		start := len(vals)
		vals = append(vals, vs...)
		out[k] = vals[start:len(vals):len(vals)]
	}
	for k, vs := range fresh {
		if !updatable(k) {
			continue
		}
		start := len(vals)
		vals = append(vals, vs...)
		out[k] = vals[start:len(vals):len(vals)]
	}
	vals = append(vals, value)
	out[HeaderName] = vals[len(vals)-1:]
	return out
}

// varyNames parses a response's Vary field values into canonical,
// deduplicated names, leaving out the credential headers (the owner
// partitions by credential instead). star reports "Vary: *", which makes a
// response unusable for any later request.
func parseVary(values []string, credential []string) (names []string, star bool) {
	for _, v := range values {
		for _, tok := range strings.Split(v, ",") {
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
			names = append(names, name)
		}
	}
	slices.Sort(names)
	return slices.Clip(names), false
}
