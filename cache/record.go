package cache

import (
	"bytes"
	"net/http"
	"strings"
	"sync/atomic"
)

// maxVariants bounds the answers one record keeps, so that a URL fetched
// with many credentials whose representations all differ (GitHub's ETags
// differ per token) cannot grow without bound.
const maxVariants = 8

// recordOverhead approximates the bytes a record and its bookkeeping take
// beyond its variants.
const recordOverhead = 64

// record is what the cache keeps under one key (a URL and its Accept
// values): the answers stored for it, newest first, at most one per
// credential owner.
//
// At most one variant is shared: any credential may revalidate it, with
// its ETag alone. That is safe because the server decides: it answers
// 304 only when the representation it would send to this credential has
// that ETag, and a credential that may not see the resource gets 403 or
// 404. A Last-Modified date is not enough for another owner: "not
// modified since" says nothing about whether this credential's
// representation is the stored one (GitHub's repository answers carry
// per-user permissions), so an answer with no ETag is kept for its owner
// alone, as is, through a PrivatePerOwner view, one marked
// Cache-Control: private.
//
// When an owner's full answer has another ETag than the shared one, the
// cache cannot tell a changed resource (every older variant is stale) from
// per-owner representations (each still valid for its owner): the new
// answer becomes the shared one, the one it replaces stays its owner's
// own. So owners whose representations differ each keep revalidating
// their own answer, and after a change the newest answer is what the next
// owner tries.
//
// A record never changes once built (but for its LRU links and used); a
// change builds a new one.
type record struct {
	key      key
	variants []*Entry
	size     int64

	// LRU links, guarded by the LRU's mutex.
	prev, next *record

	// used is when the backend last recorded a use of the record's blob
	// (Unix milliseconds): a read or a write of it, or a TouchBlob.
	used atomic.Int64
}

func newRecord(k key, variants []*Entry) *record {
	r := &record{key: k, variants: variants, size: recordOverhead}
	for _, v := range variants {
		r.size += v.size
	}
	return r
}

// absentRecord stands for "the backend had nothing under k" in a memory
// front (see core.lookup).
func absentRecord(k key) *record {
	return &record{key: k, size: recordOverhead}
}

// absent reports whether r is an absentRecord.
func (r *record) absent() bool { return len(r.variants) == 0 }

// pick returns the variant a request of owner o may revalidate, or nil:
// o's own (shared or not) when the request matches its Vary fields, else
// the shared one if it matches and o may use it. With privatePerOwner, a
// shared answer marked private is for its owner alone.
func (r *record) pick(req *http.Request, o party, privatePerOwner bool) *Entry {
	var shared *Entry
	for _, v := range r.variants {
		switch {
		case v.owner == o:
			if v.matches(req) {
				return v
			}
		case v.shared:
			shared = v
		}
	}
	if shared == nil || (privatePerOwner && shared.private) || !shared.matches(req) {
		return nil
	}
	return shared
}

// with returns the record holding e, a new answer for its owner, in place
// of whatever that owner had. A shareable e (e.shared) becomes the shared
// variant; the previous shared one, another owner's, goes if it has the
// same ETag (the same representation) and otherwise stays as its owner's
// own. The oldest variants go beyond maxVariants or maxBytes; e stays.
func (r *record) with(e *Entry, maxBytes int64) *record {
	out := make([]*Entry, 1, maxVariants+1)
	out[0] = e
	if r != nil {
		for _, v := range r.variants {
			switch {
			case v.owner == e.owner:
				continue
			case v.shared && e.shared && (sameETag(v.etag, e.etag) || v.ruled && e.ruled && bytes.Equal(v.body, e.body)):
				// The same representation (with a tag rule, the same
				// body: the tags differ by credential only).
				continue
			case v.shared && e.shared:
				v = v.ownedCopy()
			}
			out = append(out, v)
		}
	}
	nr := newRecord(e.key, out)
	for len(nr.variants) > 1 && (len(nr.variants) > maxVariants || nr.size > maxBytes) {
		last := nr.variants[len(nr.variants)-1]
		nr.variants = nr.variants[:len(nr.variants)-1]
		nr.size -= last.size
	}
	return nr
}

// without returns the record without owner o's variant: the server sent
// o a newer answer the cache could not keep. nil means nothing is left.
func (r *record) without(o party) *record {
	if r == nil {
		return nil
	}
	i := r.index(func(v *Entry) bool { return v.owner == o })
	if i < 0 {
		return r
	}
	return r.replace(i, nil)
}

// refreshed returns the record with old replaced by e (which takes its
// place and kind), or r itself when old is no longer there: a newer answer
// replaced it meanwhile, and a slow 304 must not bring the older one back.
func (r *record) refreshed(old, e *Entry) *record {
	if r == nil {
		return nil
	}
	i := r.index(func(v *Entry) bool { return v.same(old) })
	if i < 0 {
		return r
	}
	return r.replace(i, e)
}

func (r *record) index(match func(*Entry) bool) int {
	for i, v := range r.variants {
		if match(v) {
			return i
		}
	}
	return -1
}

// replace returns a record with variant i replaced by e, or removed when e
// is nil (nil when it was the last).
func (r *record) replace(i int, e *Entry) *record {
	out := make([]*Entry, 0, len(r.variants))
	out = append(out, r.variants[:i]...)
	if e != nil {
		out = append(out, e)
	}
	out = append(out, r.variants[i+1:]...)
	if len(out) == 0 {
		return nil
	}
	return newRecord(r.key, out)
}

// responses counts the stored responses of r.
func (r *record) responses() int {
	if r == nil {
		return 0
	}
	return len(r.variants)
}

// ownedCopy returns e as its owner's own variant, no longer shared.
func (e *Entry) ownedCopy() *Entry {
	c := *e
	c.shared = false
	return &c
}

// same reports whether v is the stored variant e was read as: the same
// kind, owner and validators, stored at the same moment. (With a backend,
// each read decodes new Entry values, so pointers cannot tell.)
func (e *Entry) same(v *Entry) bool {
	return e == v || (e.shared == v.shared && e.owner == v.owner && e.etag == v.etag &&
		e.lastModified == v.lastModified && e.storedAt.Equal(v.storedAt))
}

// sameETag compares two entity tags the weak way (RFC 9110 §8.8.3.2), as
// a server does for If-None-Match.
func sameETag(a, b string) bool {
	return a != "" && strings.TrimPrefix(a, "W/") == strings.TrimPrefix(b, "W/")
}
