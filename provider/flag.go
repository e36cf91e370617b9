package provider

import (
	"fmt"
	"slices"
	"strings"
)

// ParseProviderFlag parses one value of the repeatable --provider flag,
// NAME=BASEURL, into a provider with the defaults of the kind NAME implies
// (github, gitlab, huggingface/hf, gitea/codeberg/forgejo; anything else is
// generic). Errors start with "--provider VALUE:" and say what was expected;
// a password in the URL is never repeated.
func ParseProviderFlag(value string) (*Provider, error) {
	name, base, ok := strings.Cut(value, "=")
	shown := redactURL(value)
	if ok {
		shown = name + "=" + redactURL(base)
	}
	fail := func(format string, args ...any) error {
		return fmt.Errorf("--provider %s: %s", shown, fmt.Sprintf(format, args...))
	}
	if !ok {
		return nil, fail("expected NAME=BASEURL, e.g. github=https://api.github.com or ghe=https://ghe.example.com/api/v3")
	}
	name = strings.TrimSpace(name)
	if name == "" {
		return nil, fail("NAME is empty; expected NAME=BASEURL, e.g. github=https://api.github.com")
	}
	cname := CanonicalName(name)
	if !validName(cname) {
		return nil, fail("NAME %q may contain only letters, digits, '-', '_' and '.', starting with a letter or digit", name)
	}
	p, err := New(cname, KindOf(cname), base)
	if err != nil {
		return nil, fail("%v", err)
	}
	return p, nil
}

// ApplyFlag applies one --provider NAME=BASEURL value: a provider of that name
// that already exists (built in, or from the config file) moves to the new
// base URL and keeps the rest of its configuration; an unknown name adds a new
// provider with the defaults of its kind.
func (r *Registry) ApplyFlag(value string) error {
	p, err := ParseProviderFlag(value)
	if err != nil {
		return err
	}
	if old := r.Lookup(p.Name); old != nil {
		moved := *old
		moved.owned = nil
		// The flag was validated above, so only a clash with another
		// provider can fail below.
		if err := moved.SetBaseURL(p.base.String()); err != nil {
			return fmt.Errorf("--provider %s=%s: %v", p.Name, p.base, err)
		}
		if slices.Equal(old.TokenEnv, old.defaultTokenEnv()) {
			// A generic provider's variable follows its host unless configured.
			moved.TokenEnv = moved.defaultTokenEnv()
		}
		p = &moved
	}
	if err := r.Add(p); err != nil {
		return fmt.Errorf("--provider %s=%s: %v", p.Name, p.base, err)
	}
	return nil
}
