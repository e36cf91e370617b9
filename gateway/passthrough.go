package gateway

import (
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

// refusalsPerTracked is how many rejected tokens are remembered per
// tracked token: rejected tokens are cheap to remember (a digest and a
// time) and each one forgotten may be sent upstream again.
const refusalsPerTracked = 8

// tokenKey identifies a client token at one provider: a SHA-256 digest,
// never the token.
type tokenKey [sha256.Size]byte

func newTokenKey(p *provider.Provider, token string) tokenKey {
	return sha256.Sum256([]byte(p.Name + "\x00" + token))
}

// passThrough keeps one rate-keeping transport per client token seen with
// --pass-through. Each is an ordinary transport whose pool holds just the
// client's token, built from the same options as the gateway's own
// transport — same quota state, cache, credential store and metrics — so
// the client's quota is tracked like any configured credential's: its
// owner is learnt with the provider's "who am I" request before first use
// (alone in its pool, nothing else can tell; tokens of one account share
// one bucket, also with the gateway's own tokens of that account), it is
// paced, and its 401 marks it invalid. The
// least recently used transports are dropped beyond max; their quota state
// stays in the shared state. The cache is shared through a view that keeps
// private answers with their owner.
//
// A token the provider rejects (401) is not tracked: its transport is
// dropped, and the token is refused by the gateway itself for the refusal
// period, so that a client repeating a bad token (or an attacker trying
// many) does not make the gateway send it upstream again and again. The
// refused tokens are remembered by digest, the least recently refused
// forgotten beyond refusalsPerTracked·max.
type passThrough struct {
	base    transport.Options
	main    *transport.Transport
	refusal time.Duration // 0: rejected tokens are not refused
	now     func() time.Time

	mu      sync.Mutex
	tracked *lru[tokenKey, *ptEntry]
	next    map[string]int
	refused *lru[tokenKey, time.Time] // until when each rejected token is refused
}

type ptEntry struct {
	key      tokenKey
	provider string
	identity string
	index    int
	t        *transport.Transport
}

func newPassThrough(base transport.Options, main *transport.Transport, max int, refusal time.Duration, now func() time.Time) *passThrough {
	if max <= 0 {
		max = DefaultMaxPassThrough
	}
	// Per-token transports must not close what the gateway's transport
	// owns (the shared store), nor keep their own copy of the pools.
	base.OnClose = nil
	// Clients are separate parties: an answer marked private to a
	// client's token is revalidated by its owner only, and clients never
	// revalidate private answers to the gateway's own tokens (see
	// cache.Cache.PrivatePerOwner). Public answers are shared by all.
	base.Cache = base.Cache.PrivatePerOwner()
	return &passThrough{base: base, main: main, refusal: refusal, now: now,
		tracked: newLRU[tokenKey, *ptEntry](max), next: map[string]int{},
		refused: newLRU[tokenKey, time.Time](refusalsPerTracked * max)}
}

// refusedUntil reports whether the token is being refused, and until when.
func (pt *passThrough) refusedUntil(key tokenKey) (time.Time, bool) {
	pt.mu.Lock()
	defer pt.mu.Unlock()
	until, ok := pt.refused.get(key)
	if ok && !pt.now().Before(until) {
		pt.refused.remove(key)
		return time.Time{}, false
	}
	return until, ok
}

// rejected records that the provider rejected the token: it is no longer
// tracked, and is refused for the refusal period.
func (pt *passThrough) rejected(key tokenKey) {
	pt.mu.Lock()
	defer pt.mu.Unlock()
	pt.tracked.remove(key)
	if pt.refusal > 0 {
		pt.refused.add(key, pt.now().Add(pt.refusal))
	}
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

// get returns the transport for the client's token at provider p (key is
// its digest), and the identity that stands for the token in coalescing
// keys (a digest, never the token).
func (pt *passThrough) get(p *provider.Provider, key tokenKey, token string) (*transport.Transport, string, error) {
	pt.mu.Lock()
	defer pt.mu.Unlock()
	if e, ok := pt.tracked.get(key); ok {
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
	// Alone in its pool, the token's answers have nothing to be compared
	// with: its owner is learnt by asking.
	opts.AskOwnerFirst = true
	t, err := transport.New(opts)
	if err != nil {
		return nil, "", fmt.Errorf("pass-through transport: %w", err)
	}
	e := &ptEntry{key: key, provider: p.Name, identity: "pt:" + hex.EncodeToString(key[:]), index: index, t: t}
	pt.tracked.add(key, e)
	return t, e.identity, nil
}

// len returns how many client tokens have a transport.
func (pt *passThrough) len() int {
	pt.mu.Lock()
	defer pt.mu.Unlock()
	return pt.tracked.len()
}

// status reports the pass-through credentials of the given providers (all
// when none), ordered by provider and number.
func (pt *passThrough) status(ctx context.Context, now time.Time, only []string) ([]transport.CredentialStatus, error) {
	pt.mu.Lock()
	var entries []*ptEntry
	for _, e := range pt.tracked.values() {
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
