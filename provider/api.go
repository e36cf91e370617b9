package provider

import (
	"errors"
	"fmt"
	"net/http"
	"net/url"
	"slices"
	"strings"
	"sync"
	"sync/atomic"
)

// Kind is the API dialect a provider speaks: how a token is sent, how paths
// map to rate-limit resources, where the owner of a token is found. Each
// kind is an [API]; its constant lives in that API's file (GitHub in
// github.go, ...).
type Kind string

// API is everything ratekeeper knows about one kind of API that no header
// states. Each kind implements it in a file of its own — github.go,
// gitlab.go, huggingface.go, gitea.go, openai.go, anthropic.go,
// generic.go — and is listed once in
// the registry below; [Register] adds one from outside the package.
//
// The methods answer for the API, not for one provider of it: they are
// given the provider's base URL (or a path below it) and know nothing of
// how the provider is configured. A [Provider] asks its API once when it is
// built (auth, token variables, secondary limits, URLs) and on every
// request for what depends on the request (resource, costs, tags).
//
// Embed [GenericAPI] to inherit a generic API's answer to every question
// and write only those that differ.
type API interface {
	// Kind names the API: the value of a config file's kind key.
	Kind() Kind
	// Aliases are other names that imply the kind: a provider so named
	// gets it without a kind key (hf; codeberg, forgejo).
	Aliases() []string
	// Builtin is the provider [Defaults] configures for this API, or the
	// zero Builtin for none.
	Builtin() Builtin

	// Auth is how a token travels in a request.
	Auth() Auth
	// TokenEnv lists the environment variables holding the tokens of the
	// provider called name rooted at base, read in order.
	TokenEnv(name string, base *url.URL) []string
	// Secondary is the secondary limits assumed until configured.
	Secondary() Secondary

	// GraphQLURL is the GraphQL endpoint of the API rooted at base, or
	// nil. An endpoint outside base (GitHub Enterprise Server's
	// /api/graphql beside /api/v3) is owned as well, and a request to it
	// is classified as the path /graphql.
	GraphQLURL(base *url.URL) *url.URL
	// WebURL is where the repository pages of the API rooted at base
	// live, or nil when unknown.
	WebURL(base *url.URL) *url.URL

	// Classify says what a request spends from its method (upper case)
	// and its path below the base URL: only Resource, Write and Free;
	// the provider works out the rest from them and its configuration.
	Classify(method, rel string) Request
	// Group is the endpoint group a request with this method and path
	// below the base URL belongs to, as a path pattern below the base
	// ("/users/*", "POST /projects/*/issues"; see [Pattern]), or "" when
	// the API knows none: a refusal the announced buckets do not explain
	// pauses that group and nothing else (see [Provider.ScopeOf]).
	Group(method, rel string) string
	// PriceQuery prices a query sent to resource with this body (a
	// GraphQL request) when the API counts queries by their content;
	// false leaves the request at one unit.
	PriceQuery(resource string, body []byte) (Query, bool)
	// StatedCost is the cost an answer's body says its query had.
	StatedCost(body []byte) (int64, bool)
	// EntityTag is the tag the server gives an answer with this body to a
	// request carrying header h, when it is known how it computes them.
	EntityTag(h http.Header, body []byte) (string, bool)

	// WhoAmIURL is the endpoint naming the owner of a token, or nil.
	WhoAmIURL(base *url.URL) *url.URL
	// ParseOwner reads a successful answer of WhoAmIURL.
	ParseOwner(body []byte) (Owner, error)
	// RejectsToken says whether a 401 with this header and body prefix
	// may mean the token itself was refused (rather than, say, a private
	// resource).
	RejectsToken(h http.Header, body []byte) bool
	// StatusURL is an endpoint reporting every bucket without spending
	// any, or nil; ParseStatus reads its answer.
	StatusURL(base *url.URL) *url.URL
	ParseStatus(body []byte) (map[string]ResourceLimit, error)

	// ReadmeURL is the request for the README of the repository whose
	// page is page: its URL and the Accept header it needs (may be "").
	// An error wrapping [errors.ErrUnsupported] says the API has no known
	// README endpoint.
	ReadmeURL(page RepoPage) (u *url.URL, accept string, err error)

	// EncodedSlashes says whether the API's paths use encoded slashes
	// (%2F) in one segment (GitLab's project paths), which the gateway
	// otherwise refuses.
	EncodedSlashes() bool
	// TokenParams are query parameters that carry a token to this API,
	// which the gateway refuses besides the common ones.
	TokenParams() []string
	// AppInstallations says whether GitHub App installations can be its
	// credentials.
	AppInstallations() bool
	// RepoOwner is the account owning the repository (organisation,
	// group) a request's escaped path below the base URL is about, and
	// the repository's name when it names one; "" for none (see
	// [Provider.RepoOwner]).
	RepoOwner(escapedRel string) (owner, repo string)
}

// HeaderOwner is an API whose answers name the owner of the token that
// sent them in a header (OpenAI's openai-organization): the "who am I"
// answer's header names it, and [API.ParseOwner] is not asked.
type HeaderOwner interface {
	OwnerFromHeader(h http.Header) (Owner, bool)
}

// DefaultHeaders is an API that needs headers on every request, which a
// request gets when its caller did not set them (Anthropic's
// anthropic-version).
type DefaultHeaders interface {
	DefaultHeaders() http.Header
}

// Builtin is a provider ratekeeper configures for an API without being
// asked.
type Builtin struct {
	Name    string
	BaseURL string
	// Aliases are other spellings of Name that name the same provider
	// (hf for huggingface).
	Aliases []string
}

// Query is what [API.PriceQuery] says of a query: its shape (its text and
// price apart from variables' values: queries of one shape cost alike),
// the units it is predicted to take from its bucket, and whether it
// writes.
type Query struct {
	Shape    string
	Units    int
	Mutation bool
}

// builtinAPIs lists the APIs ratekeeper knows, in the order messages name
// them. Adding one is a file implementing API and one line here (and, for
// the simulator, one dialect file in package sim).
var builtinAPIs = []API{
	githubAPI{},
	gitlabAPI{},
	huggingFaceAPI{},
	giteaAPI{},
	openaiAPI{},
	anthropicAPI{},
	GenericAPI{},
}

// apis holds the built-in APIs and those registered since. Lookups read it
// without a lock (a gateway asks for every request); Register replaces it
// whole under registering.
var (
	apis        atomic.Pointer[[]API]
	registering sync.Mutex
)

func init() { apis.Store(&builtinAPIs) }

// registered returns the known APIs in order. The slice is never modified.
func registered() []API { return *apis.Load() }

// Register adds an API to the kinds every registry knows. Call it before
// building providers, typically from an init function. Its kind, its
// aliases and its built-in provider's name and aliases must not be taken.
func Register(api API) error {
	k := api.Kind()
	if !validName(string(k)) {
		return fmt.Errorf("kind %q may contain only letters, digits, '-', '_' and '.'", k)
	}
	registering.Lock()
	defer registering.Unlock()
	known := registered()
	for _, name := range append([]string{string(k)}, api.Aliases()...) {
		if other, ok := apiNamed(known, name); ok {
			return fmt.Errorf("kind name %q is taken by kind %s", name, other.Kind())
		}
	}
	b := api.Builtin()
	for _, name := range append([]string{b.Name}, b.Aliases...) {
		if other, ok := builtinNamed(known, strings.ToLower(name)); ok && name != "" {
			return fmt.Errorf("provider name %q is taken by the built-in provider %s", name, other.Name)
		}
	}
	if err := checkBuiltin(known, b); err != nil {
		return fmt.Errorf("kind %s: built-in provider %s: %v", k, b.Name, err)
	}
	next := append(slices.Clip(known), api)
	apis.Store(&next)
	return nil
}

// checkBuiltin checks a new API's built-in provider, which [Defaults] will
// build: a valid name and a base URL that no other built-in provider has.
func checkBuiltin(known []API, b Builtin) error {
	if b.Name == "" {
		return nil
	}
	if !validName(b.Name) {
		return errors.New("the name may contain only letters, digits, '-', '_' and '.'")
	}
	base, err := ParseBaseURL(b.BaseURL)
	if err != nil {
		return err
	}
	for _, a := range known {
		if o := a.Builtin(); o.Name != "" && o.BaseURL == base.String() {
			return fmt.Errorf("base URL %s is the built-in provider %s's", base, o.Name)
		}
	}
	return nil
}

// apiNamed finds the API a kind name or alias (lower case) names.
func apiNamed(known []API, name string) (API, bool) {
	for _, a := range known {
		if string(a.Kind()) == name || slices.Contains(a.Aliases(), name) {
			return a, true
		}
	}
	return nil, false
}

func lookupAPI(name string) (API, bool) { return apiNamed(registered(), strings.ToLower(name)) }

// KindOf returns the kind a provider name implies: the kind itself or one of
// its aliases (hf; codeberg, forgejo), else Generic. Case is ignored.
func KindOf(name string) Kind {
	if a, ok := lookupAPI(name); ok {
		return a.Kind()
	}
	return Generic
}

// ParseKind parses the value of a config file's kind key. Unlike [KindOf] it
// accepts only known kinds and aliases, because a typo there would otherwise
// silently produce a generic provider.
func ParseKind(s string) (Kind, error) {
	if a, ok := lookupAPI(strings.TrimSpace(s)); ok {
		return a.Kind(), nil
	}
	return "", fmt.Errorf("unknown kind %q; known kinds: %s", s, KnownKinds())
}

// KnownKinds lists the kinds and their aliases, for error messages:
// "github, gitlab, huggingface (alias hf), …".
func KnownKinds() string {
	var out []string
	for _, a := range registered() {
		s := string(a.Kind())
		switch al := a.Aliases(); len(al) {
		case 0:
		case 1:
			s += " (alias " + al[0] + ")"
		default:
			s += " (aliases " + strings.Join(al, ", ") + ")"
		}
		out = append(out, s)
	}
	return strings.Join(out, ", ")
}

// CanonicalName returns the name a provider is registered under: lower case,
// and another spelling of a built-in provider's name ("hf") spelt as that
// provider is ("huggingface").
func CanonicalName(name string) string {
	n := strings.ToLower(strings.TrimSpace(name))
	if b, ok := builtinNamed(registered(), n); ok {
		return b.Name
	}
	return n
}

// builtinNamed finds the built-in provider a (lower-case) name or alias
// names.
func builtinNamed(known []API, name string) (Builtin, bool) {
	for _, a := range known {
		if b := a.Builtin(); b.Name != "" && (b.Name == name || slices.Contains(b.Aliases, name)) {
			return b, true
		}
	}
	return Builtin{}, false
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

// FixedTokenEnv lists the token variables registered APIs read whatever
// their host (GITHUB_TOKEN, GH_TOKEN, GITLAB_TOKEN, HF_TOKEN, …): a host
// no provider owns must never be sent a token from one of them.
func FixedTokenEnv() []string {
	var out []string
	for _, a := range registered() {
		if a.Kind() == Generic {
			continue // its variables come from the host
		}
		b := a.Builtin()
		name, base := b.Name, &url.URL{}
		if name == "" {
			name = string(a.Kind())
		}
		if u, err := url.Parse(b.BaseURL); err == nil && b.BaseURL != "" {
			base = u
		}
		out = append(out, a.TokenEnv(name, base)...)
	}
	return out
}
