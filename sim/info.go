package sim

import (
	"fmt"
	"strconv"
	"strings"
	"time"
)

// APIInfo describes a mounted API with every default applied. It never
// contains a token's text.
type APIInfo struct {
	Name    string
	Dialect string
	// Prefix is the mount path, "/" for the root.
	Prefix    string
	Tokens    []TokenInfo
	Resources []ResourceInfo // [0] is the main resource
	// EndpointLimits are the configured endpoint limits with their
	// defaults applied (name, anonymous limit, window mode, refusal).
	EndpointLimits  []EndpointLimitConfig
	ExhaustedStatus int
	Secondary       *SecondaryConfig // nil: no secondary limits
	RequireAuth     bool
	Skew, Latency   time.Duration
	// Apps are the GitHub Apps and their installations ("acme (id 101)").
	Apps []AppInfo
}

// AppInfo is a GitHub App of an API: its id and each installation's
// account and id.
type AppInfo struct {
	ID            int64
	Installations []string
}

// URL is the API's base URL on a server reachable at base (e.g. an
// httptest.Server's URL): base followed by the prefix.
func (i APIInfo) URL(base string) string {
	base = strings.TrimRight(base, "/")
	if i.Prefix == "/" {
		return base
	}
	return base + i.Prefix
}

// TokenInfo describes a configured token without revealing it.
type TokenInfo struct {
	Masked string // e.g. "#2 ghp_…a1b2"
	Owner  string
	UserID int64
}

// ResourceInfo is a resource's limits with defaults applied.
type ResourceInfo struct {
	Name           string
	Limit          int64 // 0: unlimited
	AnonymousLimit int64 // -1: anonymous requests need a token
	Window         time.Duration
	WindowMode     string
}

// APIs describes the mounted APIs in config order.
func (s *Server) APIs() []APIInfo {
	var out []APIInfo
	for _, a := range s.apis {
		info := APIInfo{
			Name: a.name, Dialect: a.kind, Prefix: displayPrefix(a.prefix),
			ExhaustedStatus: a.exhaustedStatus, RequireAuth: a.requireAuth, Skew: a.skew, Latency: a.latency,
		}
		if a.secondary != nil {
			sc := *a.secondary
			info.Secondary = &sc
		}
		for i, t := range a.tokenTexts {
			o := a.tokenOwners[i]
			info.Tokens = append(info.Tokens, TokenInfo{Masked: MaskToken(i+1, t), Owner: o.name, UserID: o.id})
		}
		if a.apps != nil {
			for _, ap := range a.apps.list {
				ai := AppInfo{ID: ap.cfg.ID}
				for _, in := range ap.insts {
					ai.Installations = append(ai.Installations, fmt.Sprintf("%s (id %d)", in.account, in.id))
				}
				info.Apps = append(info.Apps, ai)
			}
		}
		for _, r := range a.res {
			mode := WindowRolling
			if r.fixed {
				mode = WindowFixed
			}
			if r.continuous {
				mode = WindowContinuous
			}
			info.Resources = append(info.Resources, ResourceInfo{Name: r.name, Limit: r.limit, AnonymousLimit: r.anonLimit,
				Window: time.Duration(r.window) * time.Second, WindowMode: mode})
		}
		for _, el := range a.endpointLimits {
			mode := WindowRolling
			if el.fixed {
				mode = WindowFixed
			}
			info.EndpointLimits = append(info.EndpointLimits, EndpointLimitConfig{Pattern: el.pattern, Name: el.name,
				Limit: el.limit, AnonymousLimit: el.anonLimit, Window: time.Duration(el.window) * time.Second, WindowMode: mode, Refusal: el.refusal})
		}
		out = append(out, info)
	}
	return out
}

// MaskToken shows the n-th token (1-based) without revealing it: its
// position, then at most a quarter of its text at each end, 4 characters at
// most: "#2 ghp_…a1b2", "#1 to…-1".
func MaskToken(n int, token string) string {
	r := []rune(token)
	k := min(4, len(r)/4)
	if k == 0 {
		return fmt.Sprintf("#%d …", n)
	}
	return fmt.Sprintf("#%d %s…%s", n, string(r[:k]), string(r[len(r)-k:]))
}

// ParseTokens reads a token list as the command line gives it: a count N
// makes N tokens named sim-token-1 … sim-token-N, each its own owner
// (user1 … userN); otherwise a comma-separated list of TOKEN or
// OWNER:TOKEN, where tokens with the same OWNER share that owner's buckets.
func ParseTokens(spec string) ([]TokenConfig, error) {
	spec = strings.TrimSpace(spec)
	if spec == "" {
		return nil, nil
	}
	if n, err := strconv.Atoi(spec); err == nil {
		if n < 0 || n > 10000 {
			return nil, fmt.Errorf("tokens: %d is not a usable count (want 0 to 10000, or a list like alice:tok-a,bob:tok-b)", n)
		}
		toks := make([]TokenConfig, n)
		for i := range toks {
			toks[i] = TokenConfig{Token: fmt.Sprintf("sim-token-%d", i+1)}
		}
		return toks, nil
	}
	var toks []TokenConfig
	for i, item := range strings.Split(spec, ",") {
		item = strings.TrimSpace(item)
		if item == "" {
			return nil, fmt.Errorf("tokens: item %d is empty (want TOKEN or OWNER:TOKEN, separated by commas)", i+1)
		}
		t := TokenConfig{Token: item}
		if owner, tok, ok := strings.Cut(item, ":"); ok {
			if owner == "" || tok == "" {
				return nil, fmt.Errorf("tokens: item %d has an empty owner or token (want OWNER:TOKEN)", i+1)
			}
			t = TokenConfig{Owner: owner, Token: tok}
		}
		toks = append(toks, t)
	}
	return toks, nil
}
