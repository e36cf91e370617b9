package transport

import (
	"net/http"
	"strings"

	"github.com/ratekeeper/ratekeeper/cache"
	"github.com/ratekeeper/ratekeeper/provider"
)

// A server that mixes the request into its entity tags (GitHub hashes the
// Accept, Authorization and Cookie values with the body) answers a tag
// given to one credential with a full answer when another credential
// sends it. For the transport's own cache, the cache's view per provider
// sends the right tag (see cacheFor). For a request its caller made
// conditional itself — a gateway client's own cache, poll's baseline, a
// re-sync's previous answer — translate does the same from the body the
// caller's tag names.

// translate adds to the If-None-Match of out, a GET its caller made
// conditional, the tag p's server gives out's credential for the body the
// caller's first tag names: the body the caller holds (cache.HeldBody of
// the request's context), or the answer stored in the cache under that
// tag. The caller's tags stay in the list, so a server whose rule changed
// still matches them as before. It returns the caller's first tag when it
// added one, "" otherwise.
func (t *Transport) translate(out *http.Request, p *provider.Provider) string {
	inm := out.Header.Get("If-None-Match")
	if inm == "" || (out.Method != http.MethodGet && out.Method != "") {
		return ""
	}
	first, _, _ := strings.Cut(inm, ",")
	first = strings.TrimSpace(first)
	if first == "*" {
		return ""
	}
	body := cache.HeldBody(out.Context())
	if body == nil {
		body = t.cache.BodyTagged(out, first)
	}
	if body == nil {
		return ""
	}
	tag, ok := p.EntityTag(out.Header, body)
	if !ok || strings.TrimPrefix(tag, "W/") == strings.TrimPrefix(first, "W/") {
		return ""
	}
	out.Header["If-None-Match"] = []string{tag + ", " + inm}
	return first
}
