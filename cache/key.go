package cache

import (
	"crypto/sha256"
	"encoding/binary"
	"net/http"
	"strings"
)

// keySize is the length of a key: a SHA-256 digest.
type key = [sha256.Size]byte

// keyVersion starts every hashed key, so a change in what goes into a key
// can never make an old blob match a new request. Version 2 left the owner
// out of the key (it names a variant within a record instead).
const keyVersion = "rkc2"

// requestKey returns the primary key of a GET request: SHA-256 over the
// method, the canonical URL (scheme and host in lower case, default port
// dropped, escaped path, raw query as given) and the Accept values. The
// credential is not part of it: whoever sends the request may revalidate
// the record's shared answer (see record). Fields are length-prefixed so
// no two different inputs hash the same bytes. It does not allocate for
// URLs of common length.
func requestKey(req *http.Request) key {
	var arr [512]byte
	b := append(arr[:0], keyVersion...)
	b = appendField(b, http.MethodGet)

	u := req.URL
	b = appendLowerField(b, u.Scheme)
	host := req.Host
	if host == "" {
		host = u.Host
	}
	b = appendLowerField(b, stripDefaultPort(u.Scheme, host))
	b = appendField(b, u.EscapedPath())
	if u.RawQuery != "" || u.ForceQuery {
		b = append(b, '?')
		b = appendField(b, u.RawQuery)
	} else {
		b = append(b, '-')
	}
	accept := req.Header["Accept"]
	b = binary.AppendUvarint(b, uint64(len(accept)))
	for _, v := range accept {
		b = appendField(b, strings.TrimSpace(v))
	}
	return sha256.Sum256(b)
}

// party identifies a credential owner within a record: a truncated
// SHA-256 of the owner string, so that a backend never holds the owner.
type party [16]byte

// partyOf returns the party of owner ("" for anonymous). It does not
// allocate for owners of common length.
func partyOf(owner string) party {
	var arr [128]byte
	b := append(arr[:0], keyVersion+"/owner/"...)
	b = append(b, owner...)
	sum := sha256.Sum256(b)
	var p party
	copy(p[:], sum[:])
	return p
}

// varyKey hashes the values req carries for the header names a stored
// response varies on (canonical names, as Entry keeps them). Values are
// hashed, never stored, so a Cookie or similar value does not reach a
// backend; a header that is absent hashes differently from an empty one.
func varyKey(req *http.Request, names []string) key {
	var arr [512]byte
	b := append(arr[:0], keyVersion...)
	for _, name := range names {
		b = appendField(b, name)
		vs, ok := req.Header[name]
		if !ok {
			b = append(b, 0)
			continue
		}
		b = append(b, 1)
		b = binary.AppendUvarint(b, uint64(len(vs)))
		for _, v := range vs {
			b = appendField(b, strings.TrimSpace(v))
		}
	}
	return sha256.Sum256(b)
}

func appendField(b []byte, s string) []byte {
	b = binary.AppendUvarint(b, uint64(len(s)))
	return append(b, s...)
}

func appendLowerField(b []byte, s string) []byte {
	b = binary.AppendUvarint(b, uint64(len(s)))
	for i := 0; i < len(s); i++ {
		c := s[i]
		if 'A' <= c && c <= 'Z' {
			c += 'a' - 'A'
		}
		b = append(b, c)
	}
	return b
}

// stripDefaultPort drops ":443" from an https host and ":80" from an http
// one, so https://API.github.com:443/x and https://api.github.com/x share a
// key.
func stripDefaultPort(scheme, host string) string {
	switch {
	case strings.EqualFold(scheme, "https") && strings.HasSuffix(host, ":443"):
		return host[:len(host)-4]
	case strings.EqualFold(scheme, "http") && strings.HasSuffix(host, ":80"):
		return host[:len(host)-3]
	}
	return host
}

// hasDirective reports whether any of the Cache-Control field values lists
// directive (lower case, without arguments), ignoring case and any
// "=argument". It does not allocate.
func hasDirective(values []string, directive string) bool {
	for _, v := range values {
		for v != "" {
			var item string
			if i := strings.IndexByte(v, ','); i >= 0 {
				item, v = v[:i], v[i+1:]
			} else {
				item, v = v, ""
			}
			if i := strings.IndexByte(item, '='); i >= 0 {
				item = item[:i]
			}
			if strings.EqualFold(strings.TrimSpace(item), directive) {
				return true
			}
		}
	}
	return false
}
