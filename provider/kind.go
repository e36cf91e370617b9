package provider

import (
	"fmt"
	"strings"
)

// Kind is the API dialect a provider speaks: how a token is sent, how paths
// map to rate-limit resources, where the owner of a token is found.
type Kind string

// The kinds ratekeeper knows. Any name that is not a kind or an alias of one
// is a Generic provider.
const (
	GitHub      Kind = "github"
	GitLab      Kind = "gitlab"
	HuggingFace Kind = "huggingface"
	Gitea       Kind = "gitea"
	Generic     Kind = "generic"
)

// kindNames maps every name and alias that implies a kind to that kind.
var kindNames = map[string]Kind{
	"github":      GitHub,
	"gitlab":      GitLab,
	"huggingface": HuggingFace,
	"hf":          HuggingFace,
	"gitea":       Gitea,
	"codeberg":    Gitea,
	"forgejo":     Gitea,
	"generic":     Generic,
}

// KindOf returns the kind a provider name implies: the kind itself or one of
// its aliases (hf; codeberg, forgejo), else Generic. Case is ignored.
func KindOf(name string) Kind {
	if k, ok := kindNames[strings.ToLower(name)]; ok {
		return k
	}
	return Generic
}

// ParseKind parses the value of a config file's kind key. Unlike [KindOf] it
// accepts only known kinds and aliases, because a typo there would otherwise
// silently produce a generic provider.
func ParseKind(s string) (Kind, error) {
	if k, ok := kindNames[strings.ToLower(strings.TrimSpace(s))]; ok {
		return k, nil
	}
	return "", fmt.Errorf("unknown kind %q; known kinds: %s", s, KnownKinds)
}

// KnownKinds lists the kinds and their aliases, for error messages.
const KnownKinds = "github, gitlab, huggingface (alias hf), gitea (aliases codeberg, forgejo), generic"

// CanonicalName returns the name a provider is registered under: lower case,
// and "hf" spelled "huggingface" because both name the same service.
func CanonicalName(name string) string {
	n := strings.ToLower(strings.TrimSpace(name))
	if n == "hf" {
		return "huggingface"
	}
	return n
}

// validName reports whether a (canonical) provider name is acceptable: it
// appears in env var names, config keys and metric labels, so it is kept to
// letters, digits, '-', '_' and '.'.
func validName(name string) bool {
	if name == "" {
		return false
	}
	for i, r := range name {
		switch {
		case r >= 'a' && r <= 'z', r >= '0' && r <= '9':
		case (r == '-' || r == '_' || r == '.') && i > 0:
		default:
			return false
		}
	}
	return true
}
