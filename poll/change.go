package poll

import (
	"bytes"
	"crypto/sha256"
	"encoding/base64"
	"encoding/hex"
	"encoding/json"
	"time"
	"unicode/utf8"
)

// Baseline is what a URL's previous answer looked like: enough to make the
// next request conditional and to tell what is new, without keeping the
// body.
type Baseline struct {
	// Seen is false until the first answer.
	Seen bool `json:"seen"`
	// ETag and LastModified are the validators sent back as If-None-Match
	// and If-Modified-Since.
	ETag         string `json:"etag,omitempty"`
	LastModified string `json:"last_modified,omitempty"`
	// Digest is the SHA-256 of the body, in hex.
	Digest string `json:"digest"`
	// Array is true when the body was a JSON array; Items then holds a
	// digest of each item.
	Array bool     `json:"array,omitempty"`
	Items []string `json:"items,omitempty"`
}

// Diff is how an answer compares with the baseline.
type Diff struct {
	// Changed is true when the body differs from the baseline's.
	Changed bool
	// NewItems are the items of a JSON array body that were not in the
	// previous answer's array (an item whose content changed counts as
	// new), in the body's order; nil unless both bodies are arrays.
	NewItems []json.RawMessage
	// Items says NewItems applies: both bodies are JSON arrays.
	Items bool
}

// Compare returns the baseline of an answer with the given validators and
// body, and how the answer differs from prev. An answer is a change when
// its body's digest differs from the previous one's: a server that ignores
// If-None-Match and sends the same body again has not changed anything.
// A JSON body is digested compacted, so a change of whitespace alone is
// not a change either. The first answer (prev.Seen false) is never a
// change.
func Compare(prev Baseline, etag, lastModified string, body []byte) (Baseline, Diff) {
	digested := body
	var compact bytes.Buffer
	if json.Compact(&compact, body) == nil {
		digested = compact.Bytes()
	}
	sum := sha256.Sum256(digested)
	next := Baseline{Seen: true, ETag: etag, LastModified: lastModified, Digest: hex.EncodeToString(sum[:])}
	items, isArray := arrayItems(body)
	if isArray {
		next.Array = true
		next.Items = make([]string, len(items))
		for i, it := range items {
			next.Items[i] = itemDigest(it)
		}
	}
	var d Diff
	if !prev.Seen || prev.Digest == next.Digest {
		return next, d
	}
	d.Changed = true
	if isArray && prev.Array {
		d.Items = true
		old := make(map[string]bool, len(prev.Items))
		for _, h := range prev.Items {
			old[h] = true
		}
		d.NewItems = []json.RawMessage{}
		for i, it := range items {
			if !old[next.Items[i]] {
				d.NewItems = append(d.NewItems, it)
			}
		}
	}
	return next, d
}

// arrayItems splits a JSON array body into its items.
func arrayItems(body []byte) ([]json.RawMessage, bool) {
	trimmed := bytes.TrimSpace(body)
	if len(trimmed) == 0 || trimmed[0] != '[' {
		return nil, false
	}
	var items []json.RawMessage
	if err := json.Unmarshal(trimmed, &items); err != nil {
		return nil, false
	}
	return items, true
}

// itemDigest identifies an array item by its compacted JSON, so that
// whitespace does not make an item new.
func itemDigest(item json.RawMessage) string {
	var buf bytes.Buffer
	if err := json.Compact(&buf, item); err == nil {
		item = buf.Bytes()
	}
	sum := sha256.Sum256(item)
	return hex.EncodeToString(sum[:8])
}

// Change is one change of a polled URL, as written on a JSON line.
type Change struct {
	// URL is the polled URL, with any credential in it masked.
	URL string
	// ETag is the answer's ETag ("" when it had none).
	ETag string
	// ChangedAt is when the change was seen.
	ChangedAt time.Time
	// Initial marks the first answer, emitted only when
	// Options.EmitInitial asks for it.
	Initial bool
	// Body is the whole body of the answer.
	Body []byte
	// ContentType is the answer's Content-Type.
	ContentType string
	// NewItems are the items new since the previous answer when both
	// answers are JSON arrays; Items says so.
	NewItems []json.RawMessage
	Items    bool
}

// MarshalJSON writes the change as one JSON object: url, etag, changed_at,
// initial (only when true), and either new_items (the new items of a JSON
// array body) or body — the JSON itself when the body is JSON, a string
// when it is other UTF-8 text, or body_base64 for anything else.
func (c Change) MarshalJSON() ([]byte, error) {
	out := struct {
		URL        string            `json:"url"`
		ETag       string            `json:"etag,omitempty"`
		ChangedAt  time.Time         `json:"changed_at"`
		Initial    bool              `json:"initial,omitempty"`
		NewItems   []json.RawMessage `json:"new_items,omitempty"`
		Body       json.RawMessage   `json:"body,omitempty"`
		BodyBase64 string            `json:"body_base64,omitempty"`
	}{URL: c.URL, ETag: c.ETag, ChangedAt: c.ChangedAt, Initial: c.Initial}
	switch {
	case c.Items:
		out.NewItems = c.NewItems
		if out.NewItems == nil {
			out.NewItems = []json.RawMessage{}
		}
		// omitempty drops an empty slice; an array that only lost items
		// still says so with "new_items":[].
		if len(out.NewItems) == 0 {
			b, err := json.Marshal(out)
			if err != nil {
				return nil, err
			}
			return append(b[:len(b)-1], []byte(`,"new_items":[]}`)...), nil
		}
	case json.Valid(c.Body):
		var buf bytes.Buffer
		if err := json.Compact(&buf, c.Body); err != nil {
			return nil, err
		}
		out.Body = buf.Bytes()
	case utf8.Valid(c.Body):
		s, err := json.Marshal(string(c.Body))
		if err != nil {
			return nil, err
		}
		out.Body = s
	default:
		out.BodyBase64 = base64.StdEncoding.EncodeToString(c.Body)
	}
	return json.Marshal(out)
}
