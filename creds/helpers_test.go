package creds

import (
	"testing"

	"github.com/ratekeeper/ratekeeper/provider"
)

func ownerOf(name, id string) provider.Owner { return provider.Owner{Name: name, ID: id} }

func builtin(t *testing.T, name string) *provider.Provider {
	t.Helper()
	p := provider.Defaults().Lookup(name)
	if p == nil {
		t.Fatalf("no built-in provider %s", name)
	}
	return p
}

func envOf(m map[string]string) func(string) (string, bool) {
	return func(k string) (string, bool) {
		v, ok := m[k]
		return v, ok
	}
}
