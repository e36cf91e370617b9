package transport

import (
	"container/list"
	"crypto/sha256"
	"encoding/base64"
	"net/http"
	"strings"
	"sync"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/ratekeeper/ratekeeper/creds"
	"github.com/ratekeeper/ratekeeper/provider"
)

// A caller may authenticate a request itself: its own Authorization
// header (or the provider's auth header), or user:pass@ in the URL, which
// http.Client turns into Basic credentials. The transport then adds no
// token, and the server charges the caller's token, not a pool's. So the
// request must be accounted to the credential it carries: it is reserved,
// paced and settled against that token's bucket, and answers (a 401's
// anonymous limit included) are stored there, never against a pool token.
// A caller's token is known by the SHA-256 of (provider, token), as the
// gateway's pass-through tokens are; when it is a pool credential's token,
// the request is that credential's.

// maxCallerCredentials bounds the callers' tokens remembered at once; the
// least recently used are forgotten (their quota state stays in the state).
const maxCallerCredentials = 256

// callerCredentials keeps a one-credential pool per caller's token.
type callerCredentials struct {
	mu    sync.Mutex
	byKey map[[sha256.Size]byte]*list.Element
	order list.List // of *callerPool, most recently used first
}

type callerPool struct {
	key  [sha256.Size]byte
	pool *creds.Pool
}

// callerPoolFor returns the pool of the credential req carries itself, or
// lane l's pool when it carries none: a pool of the one credential of l's
// pool holding the same token, or of the caller's own credential
// (creds.NewCallerToken).
func (t *Transport) callerPoolFor(l *lane, req *http.Request) *creds.Pool {
	p, pool := l.p, l.pool
	token, source, ok := callerToken(req, p)
	if !ok {
		return pool
	}
	key := sha256.Sum256([]byte(p.Name + "\x00" + token))
	cc := &t.callers
	cc.mu.Lock()
	defer cc.mu.Unlock()
	if e, ok := cc.byKey[key]; ok {
		cc.order.MoveToFront(e)
		return e.Value.(*callerPool).pool
	}
	if cc.byKey == nil {
		cc.byKey = map[[sha256.Size]byte]*list.Element{}
	}
	c := creds.NewCallerToken(p.Name, token, source)
	var own *creds.Pool
	for _, pc := range pool.Credentials() {
		if pc.ID() == c.ID() {
			own = creds.NewPool(p.Name, pc)
			break
		}
	}
	if own == nil {
		// Alone in its pool, nothing tells whose bucket it spends but
		// what a shared database remembers of the token (see restore):
		// until then, one of its own.
		c.KeepOwnBucket()
		own = creds.NewPool(p.Name, c)
	}
	cc.byKey[key] = cc.order.PushFront(&callerPool{key: key, pool: own})
	for cc.order.Len() > maxCallerCredentials {
		last := cc.order.Back()
		cc.order.Remove(last)
		old := last.Value.(*callerPool)
		delete(cc.byKey, old.key)
		t.forgetCallerPool(old.pool)
	}
	return own
}

// forgetCallerPool drops what the transport keeps per pool and per
// caller's credential.
func (t *Transport) forgetCallerPool(pool *creds.Pool) {
	t.learnings.Delete(pool)
	t.restored.Delete(pool)
	for _, c := range pool.Credentials() {
		if !c.Caller() {
			continue
		}
		t.creds.Delete(c)
		t.validations.Delete(c)
		if m := t.opts.Metrics; m != nil {
			labels := prometheus.Labels{"credential": c.Masked()}
			m.remaining.DeletePartialMatch(labels)
			m.limit.DeletePartialMatch(labels)
			m.reset.DeletePartialMatch(labels)
		}
	}
}

// callerToken returns the token a request carries itself, and where: in
// p's auth header or Authorization (the token without its scheme, or a
// Basic credential's password), or in the URL's user info. ok is false
// when the request carries none.
func callerToken(req *http.Request, p *provider.Provider) (token, source string, ok bool) {
	for _, name := range []string{p.Auth.Header, "Authorization"} {
		if v := strings.TrimSpace(req.Header.Get(name)); v != "" {
			return tokenIn(v, p.Auth.Prefix), "the request's " + http.CanonicalHeaderKey(name) + " header", true
		}
	}
	if u := req.URL.User; u != nil {
		if pass, _ := u.Password(); pass != "" {
			return pass, "the URL's user info", true
		}
		if name := u.Username(); name != "" {
			return name, "the URL's user info", true
		}
	}
	return "", "", false
}

// tokenIn is the token an auth header's value holds: without p's prefix or
// a Bearer or token scheme; a Basic credential's password (its user name
// when the password is empty: GitHub takes a token as either); else the
// whole value.
func tokenIn(v, prefix string) string {
	scheme, rest, found := strings.Cut(v, " ")
	if !found {
		return v
	}
	rest = strings.TrimSpace(rest)
	switch {
	case strings.EqualFold(scheme, prefix), strings.EqualFold(scheme, "bearer"), strings.EqualFold(scheme, "token"):
		return rest
	case strings.EqualFold(scheme, "basic"):
		raw, err := base64.StdEncoding.DecodeString(rest)
		if err != nil {
			return v
		}
		name, pass, _ := strings.Cut(string(raw), ":")
		if pass == "" {
			return name
		}
		return pass
	}
	return v
}

// basicAuth puts the URL's user info on h as Basic credentials when h has
// no Authorization, as http.Client does for the requests it sends: a
// request given to the transport directly is sent with them too.
func basicAuth(h http.Header, req *http.Request) {
	u := req.URL.User
	if u == nil || h.Get("Authorization") != "" {
		return
	}
	pass, _ := u.Password()
	h.Set("Authorization", "Basic "+base64.StdEncoding.EncodeToString([]byte(u.Username()+":"+pass)))
}
