package provider

import (
	"fmt"
	"net/url"
	"slices"
	"strings"
)

// Registry is the set of configured providers. Build it once (Defaults,
// ApplyConfig, ApplyFlag, Add) and then share it: the lookup methods are safe
// for concurrent use as long as nobody modifies the registry or its providers.
type Registry struct {
	providers []*Provider // sorted by name
}

// Defaults returns a registry holding the built-in providers, one per API
// that has one: github, gitlab, huggingface and codeberg (kind gitea).
func Defaults() *Registry {
	r := &Registry{}
	for _, api := range registered() {
		b := api.Builtin()
		if b.Name == "" {
			continue
		}
		p, err := New(b.Name, api.Kind(), b.BaseURL)
		if err != nil {
			panic("provider: built-in " + b.Name + ": " + err.Error()) // an API's Builtin is wrong
		}
		if err := r.Add(p); err != nil {
			panic("provider: built-in " + b.Name + ": " + err.Error())
		}
	}
	return r
}

// NewRegistry returns an empty registry.
func NewRegistry() *Registry { return &Registry{} }

// Add registers p, replacing a provider of the same name. Two providers may
// not share a root URL, because then nothing could tell whose token a request
// to it should carry.
func (r *Registry) Add(p *Provider) error {
	for _, q := range r.providers {
		if q.Name == p.Name {
			continue
		}
		for _, a := range p.owned {
			for _, b := range q.owned {
				if a == b {
					return fmt.Errorf("provider %q has the same base URL as provider %q (%s); give it another base URL or configure %q instead",
						p.Name, q.Name, a.url(), q.Name)
				}
			}
		}
	}
	i, found := slices.BinarySearchFunc(r.providers, p.Name, func(q *Provider, name string) int {
		return strings.Compare(q.Name, name)
	})
	if found {
		r.providers[i] = p
	} else {
		r.providers = slices.Insert(r.providers, i, p)
	}
	return nil
}

// Remove drops the provider with the given name, if any.
func (r *Registry) Remove(name string) {
	name = CanonicalName(name)
	r.providers = slices.DeleteFunc(r.providers, func(p *Provider) bool { return p.Name == name })
}

// Lookup returns the provider with the given name (case-insensitive, "hf"
// for "huggingface"), or nil.
func (r *Registry) Lookup(name string) *Provider {
	name = CanonicalName(name)
	for _, p := range r.providers {
		if p.Name == name {
			return p
		}
	}
	return nil
}

// Get returns the provider with the given name, or an error that lists the
// known names, for places where a name must refer to a configured provider.
func (r *Registry) Get(name string) (*Provider, error) {
	if p := r.Lookup(name); p != nil {
		return p, nil
	}
	return nil, fmt.Errorf("unknown provider %q; known providers: %s (add one with --provider NAME=BASEURL)",
		name, strings.Join(r.Names(), ", "))
}

// Names returns the registered names in order.
func (r *Registry) Names() []string {
	out := make([]string, len(r.providers))
	for i, p := range r.providers {
		out[i] = p.Name
	}
	return out
}

// Providers returns the registered providers ordered by name.
func (r *Registry) Providers() []*Provider { return slices.Clone(r.providers) }

// Match returns the provider whose root is the longest prefix of u (see the
// package documentation for the rules), or nil when no provider owns u.
func (r *Registry) Match(u *url.URL) *Provider {
	var best *Provider
	bestLen := -1
	for _, p := range r.providers {
		if n, ok := p.matchLen(u); ok && n > bestLen {
			best, bestLen = p, n
		}
	}
	return best
}

// MatchWeb returns the provider whose repository web root is the longest
// prefix of u (github.com for the built-in github provider), or nil.
func (r *Registry) MatchWeb(u *url.URL) *Provider {
	var best *Provider
	bestLen := -1
	for _, p := range r.providers {
		if p.webPrefix == nil {
			continue
		}
		if n, ok := p.webPrefix.match(u); ok && n > bestLen {
			best, bestLen = p, n
		}
	}
	return best
}
