package gateway

import (
	"container/list"
	"context"
	"crypto/sha256"
	"encoding/hex"
	"fmt"
	"net/http"
	"sort"
	"strings"
	"sync"
	"time"

	"github.com/ratekeeper/ratekeeper/creds"
	"github.com/ratekeeper/ratekeeper/provider"
	"github.com/ratekeeper/ratekeeper/transport"
)

// DefaultMaxPassThrough is how many client tokens' transports are kept.
const DefaultMaxPassThrough = 1024

// passThrough keeps one rate-keeping transport per client token seen with
// --pass-through. Each is an ordinary transport whose pool holds just the
// client's token, built from the same options as the gateway's own
// transport — same quota state, cache, credential store and metrics — so
// the client's quota is tracked like any configured credential's: its
// owner is learnt with the provider's "who am I" request before first use
// (tokens of one account share one bucket, also with the gateway's own
// tokens of that account), it is paced, and its 401 marks it invalid. The
// least recently used transports are dropped beyond max; their quota state
// stays in the shared state.
type passThrough struct {
	base transport.Options
	main *transport.Transport
	max  int

	mu    sync.Mutex
	byKey map[[sha256.Size]byte]*list.Element
	lru   *list.List // of *ptEntry, most recent first
	next  map[string]int
}

type ptEntry struct {
	key      [sha256.Size]byte
	provider string
	identity string
	index    int
	t        *transport.Transport
}

func newPassThrough(base transport.Options, main *transport.Transport, max int) *passThrough {
	if max <= 0 {
		max = DefaultMaxPassThrough
	}
	// Per-token transports must not close what the gateway's transport
	// owns (the shared store), nor keep their own copy of the pools.
	base.OnClose = nil
	return &passThrough{base: base, main: main, max: max, byKey: map[[sha256.Size]byte]*list.Element{}, lru: list.New(), next: map[string]int{}}
}

// tokenOf extracts the token from the value of provider p's auth header:
// the value without p's prefix, or without a "Bearer " or "token " prefix
// (GitHub accepts both). It refuses Basic credentials, which name a user
// and a password rather than a token.
func tokenOf(p *provider.Provider, value string) (string, *requestError) {
	v := strings.TrimSpace(value)
	if p.Auth.Prefix != "" && len(v) > len(p.Auth.Prefix) && strings.EqualFold(v[:len(p.Auth.Prefix)+1], p.Auth.Prefix+" ") {
		v = v[len(p.Auth.Prefix)+1:]
	} else if scheme, rest, ok := strings.Cut(v, " "); ok {
		switch strings.ToLower(scheme) {
		case "bearer", "token":
			v = rest
		case "basic":
			return "", badRequest("basic_auth", "pass-through needs a token in the %s header, not Basic credentials", p.Auth.Header)
		default:
			return "", badRequest("auth_scheme", "the %s header's scheme is not one the gateway can pass through; send \"%s\"", p.Auth.Header, authExample(p))
		}
	}
	v = strings.TrimSpace(v)
	if v == "" || strings.ContainsAny(v, " \t") || strings.EqualFold(v, "bearer") || strings.EqualFold(v, "token") {
		return "", badRequest("auth_scheme", "the %s header holds no single token; send \"%s\"", p.Auth.Header, authExample(p))
	}
	return v, nil
}

// authExample shows how provider p's auth header carries a token.
func authExample(p *provider.Provider) string {
	if p.Auth.Prefix == "" {
		return p.Auth.Header + ": TOKEN"
	}
	return p.Auth.Header + ": " + p.Auth.Prefix + " TOKEN"
}

// get returns the transport for the client's token at provider p, and the
// identity that stands for the token in coalescing keys (a digest, never
// the token).
func (pt *passThrough) get(p *provider.Provider, token string) (*transport.Transport, string, error) {
	key := sha256.Sum256([]byte(p.Name + "\x00" + token))
	pt.mu.Lock()
	defer pt.mu.Unlock()
	if el, ok := pt.byKey[key]; ok {
		pt.lru.MoveToFront(el)
		e := el.Value.(*ptEntry)
		return e.t, e.identity, nil
	}
	opts := pt.base
	opts.Pools = make(map[string]*creds.Pool, len(opts.Providers.Providers()))
	for _, q := range opts.Providers.Providers() {
		if q.Name == p.Name {
			continue
		}
		pool, err := pt.main.Pool(q.Name)
		if err != nil {
			return nil, "", err
		}
		opts.Pools[q.Name] = pool
	}
	mainPool, err := pt.main.Pool(p.Name)
	if err != nil {
		return nil, "", err
	}
	// Numbered after the configured credentials, so "#N" names one
	// credential in /status whichever kind it is.
	pt.next[p.Name]++
	index := mainPool.Len() + pt.next[p.Name]
	cred := creds.NewToken(p.Name, index, token, "pass-through")
	opts.Pools[p.Name] = creds.NewPool(p.Name, cred)
	t, err := transport.New(opts)
	if err != nil {
		return nil, "", fmt.Errorf("pass-through transport: %w", err)
	}
	e := &ptEntry{key: key, provider: p.Name, identity: "pt:" + hex.EncodeToString(key[:]), index: index, t: t}
	pt.byKey[key] = pt.lru.PushFront(e)
	for pt.lru.Len() > pt.max {
		old := pt.lru.Back()
		pt.lru.Remove(old)
		delete(pt.byKey, old.Value.(*ptEntry).key)
	}
	return t, e.identity, nil
}

// len returns how many client tokens have a transport.
func (pt *passThrough) len() int {
	pt.mu.Lock()
	defer pt.mu.Unlock()
	return pt.lru.Len()
}

// status reports the pass-through credentials of the given providers (all
// when none), ordered by provider and number.
func (pt *passThrough) status(ctx context.Context, now time.Time, only []string) ([]transport.CredentialStatus, error) {
	pt.mu.Lock()
	entries := make([]*ptEntry, 0, pt.lru.Len())
	for el := pt.lru.Front(); el != nil; el = el.Next() {
		e := el.Value.(*ptEntry)
		if len(only) == 0 || contains(only, e.provider) {
			entries = append(entries, e)
		}
	}
	pt.mu.Unlock()
	sort.Slice(entries, func(i, j int) bool {
		if entries[i].provider != entries[j].provider {
			return entries[i].provider < entries[j].provider
		}
		return entries[i].index < entries[j].index
	})
	var out []transport.CredentialStatus
	for _, e := range entries {
		st, err := e.t.Status(ctx, now, e.provider)
		if err != nil {
			return nil, err
		}
		out = append(out, st...)
	}
	return out, nil
}

func contains(list []string, s string) bool {
	for _, x := range list {
		if x == s {
			return true
		}
	}
	return false
}

// credentialHeaders are the request fields that carry tokens to some
// provider. Without pass-through they are all removed from what a client
// sends (the gateway adds its own credential); with it, only the
// provider's own auth header may be present.
var credentialHeaders = []string{"Authorization", "Private-Token", "Job-Token"}

// stripCredentials removes every credential header but keep (canonical
// name, or "" for none) from h.
func stripCredentials(h http.Header, p *provider.Provider, keep string) {
	for _, k := range credentialHeaders {
		if k != keep {
			h.Del(k)
		}
	}
	if own := http.CanonicalHeaderKey(p.Auth.Header); own != keep {
		h.Del(own)
	}
}
