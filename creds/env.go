package creds

import (
	"fmt"
	"net/http"
	"os"
	"strings"
	"time"
	"unicode"

	"github.com/ratekeeper/ratekeeper/provider"
)

// Options tune [Load].
type Options struct {
	// LookupEnv reads an environment variable; nil means os.LookupEnv.
	LookupEnv func(string) (string, bool)
	// AppTransport carries the requests that mint GitHub App installation
	// tokens; nil means http.DefaultTransport. It should not be a
	// rate-keeping transport: minting does not spend the API's quota.
	AppTransport http.RoundTripper
	// Now is the clock App installation tokens' expiry is judged on (nil:
	// time.Now).
	Now func() time.Time
}

// Load builds the credential pool of provider p:
//
//   - the tokens in each of p.TokenEnv, in order, each variable holding one
//     token or several separated by commas; a variable that is unset or set
//     to "" contributes nothing;
//   - one credential per installation of p.App, if configured;
//   - when neither yields anything, one anonymous credential, so the client
//     still works with the server's anonymous limits.
//
// Indexes run from 1 in that order. A token that appears twice is used once.
// The returned notes say what a user may want to know (duplicates dropped,
// anonymous fallback); they never contain a token. Errors name the variable,
// the entry and the masked token, such as
// "GITHUB_TOKEN: entry #3 is empty".
func Load(p *provider.Provider, opts Options) (*Pool, []string, error) {
	lookup := opts.LookupEnv
	if lookup == nil {
		lookup = os.LookupEnv
	}
	var (
		creds []*Credential
		notes []string
		seen  = map[string]*Credential{}
	)
	for _, env := range p.TokenEnv {
		v, ok := lookup(env)
		if !ok || v == "" {
			continue
		}
		tokens, err := ParseTokenList(env, v)
		if err != nil {
			return nil, nil, err
		}
		for i, tok := range tokens {
			source := fmt.Sprintf("%s entry #%d", env, i+1)
			if first, dup := seen[tok]; dup {
				notes = append(notes, fmt.Sprintf("%s: %s repeats %s (%s); using it once", p.Name, source, first.source, first.masked))
				continue
			}
			c := NewToken(p.Name, len(creds)+1, tok, source)
			seen[tok] = c
			creds = append(creds, c)
		}
	}
	if p.App != nil {
		app, err := NewApp(p, *p.App, AppOptions{FirstIndex: len(creds) + 1, Transport: opts.AppTransport, Now: opts.Now})
		if err != nil {
			return nil, nil, err
		}
		return NewAppPool(p.Name, creds, app), notes, nil
	}
	if len(creds) == 0 {
		creds = append(creds, NewAnonymous(p.Name, 1))
		where := "no token environment variable is configured"
		if len(p.TokenEnv) > 0 {
			where = "no token in " + strings.Join(p.TokenEnv, ", ")
		}
		notes = append(notes, fmt.Sprintf("%s: %s; requests go without a token, under the server's anonymous limits", p.Name, where))
	}
	return NewPool(p.Name, creds...), notes, nil
}

// ParseTokenList splits the value of environment variable env into tokens at
// commas. Every entry must be a token exactly: an empty entry ("a,,b", a
// trailing comma), surrounding whitespace, or whitespace or control
// characters inside are errors naming env, the entry's position and its
// masked form, because a silently trimmed or skipped entry hides a mistake
// the user should fix.
func ParseTokenList(env, value string) ([]string, error) {
	parts := strings.Split(value, ",")
	out := make([]string, 0, len(parts))
	for i, part := range parts {
		n := i + 1
		trimmed := strings.TrimSpace(part)
		switch {
		case trimmed == "":
			return nil, fmt.Errorf("%s: entry #%d is empty; expected tokens separated by single commas, such as tok1,tok2", env, n)
		case trimmed != part:
			return nil, fmt.Errorf("%s: entry #%d (%s) has leading or trailing whitespace; separate tokens with a comma alone", env, n, MaskToken(trimmed))
		case strings.ContainsFunc(part, unicode.IsSpace):
			return nil, fmt.Errorf("%s: entry #%d (%s) contains whitespace; a token is one word", env, n, MaskToken(part))
		case strings.ContainsFunc(part, unicode.IsControl):
			return nil, fmt.Errorf("%s: entry #%d (%s) contains a control character", env, n, MaskToken(part))
		}
		out = append(out, part)
	}
	return out, nil
}
