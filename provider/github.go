package provider

import (
	"crypto/sha256"
	"encoding/hex"
	"net/http"
	"strings"
)

// What the GitHub API does that no header states: how it computes the
// entity tags of its answers. Neither is documented; both are observed on
// api.github.com and published. The transport and the cache ask through
// the methods below, which answer for GitHub-kind providers only.

// githubTagFields are the request fields api.github.com mixes into an
// entity tag, in order.
var githubTagFields = [...]string{"Accept", "Authorization", "Cookie"}

// EntityTag returns the entity tag the provider's server gives an answer
// whose body is body to a request carrying header h, and whether the
// provider knows how its server computes them.
//
// GitHub's tag for a JSON answer is W/" + the hex SHA-256 of the
// request's Accept value, ":", its Authorization value, ":", its Cookie
// value, ":" (each only when the request carries it; several values of
// one field joined by ", ") and then the body, + ". So the tag stored for
// one token never matches a request made with another: the server
// answers another token's repeat with the full answer, charged, unless
// the client sends the tag it would give that token — which it can
// compute from the stored body. body must be the bytes the server sent.
//
// The rule is undocumented and may change: a client must check it against
// each answer it stores (the tag the answer carries must be the one the
// rule gives for the request that fetched it) and fall back to sending
// the stored tag as it is when it does not hold. Other kinds return false.
func (p *Provider) EntityTag(h http.Header, body []byte) (string, bool) {
	if p.Kind != GitHub {
		return "", false
	}
	sum := sha256.New()
	for _, name := range githubTagFields {
		if vs, ok := h[name]; ok {
			sum.Write([]byte(strings.Join(vs, ", ")))
			sum.Write([]byte{':'})
		}
	}
	sum.Write(body)
	var hexSum [2 * sha256.Size]byte
	hex.Encode(hexSum[:], sum.Sum(nil))
	return `W/"` + string(hexSum[:]) + `"`, true
}
