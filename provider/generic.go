package provider

import (
	"errors"
	"net/http"
	"net/url"
	"strings"
)

// Generic is the kind of any API ratekeeper has no file for: a
// provider whose name is no kind or alias, and every host no provider
// owns.
const Generic Kind = "generic"

// GenericAPI is an API ratekeeper knows nothing particular about: a
// Bearer token from the variable [GenericTokenEnv] names, ten requests in
// flight per owner, one bucket called "api", no web root, no "who am I"
// or status endpoint, no README request, and any 401 a possible refusal
// of the token. Its rate limits are whatever its answers' headers say,
// and [DefaultLimit] per [DefaultWindow] when they say none.
//
// Embed it in another API's type to inherit these answers and write only
// the methods that differ; Kind must be one of them.
type GenericAPI struct{}

func (GenericAPI) Kind() Kind { return Generic }

func (GenericAPI) Aliases() []string { return nil }

func (GenericAPI) Builtin() Builtin { return Builtin{} }

func (GenericAPI) Auth() Auth { return Auth{Header: "Authorization", Prefix: "Bearer"} }

func (GenericAPI) TokenEnv(name string, base *url.URL) []string {
	return []string{GenericTokenEnv(name, base.Hostname())}
}

func (GenericAPI) Secondary() Secondary {
	return Secondary{MaxConcurrency: 10, ReadPoints: 1, WritePoints: 1}
}

func (GenericAPI) GraphQLURL(*url.URL) *url.URL { return nil }

func (GenericAPI) WebURL(*url.URL) *url.URL { return nil }

func (GenericAPI) Classify(method, _ string) Request {
	return Request{Resource: "api", Write: isWrite(method)}
}

// Group is the path's first segments (see firstSegmentsGroup): a custom
// host's unannounced limits are most often per collection.
func (GenericAPI) Group(_, rel string) string { return firstSegmentsGroup(rel) }

func (GenericAPI) PriceQuery(string, []byte) (Query, bool) { return Query{}, false }

func (GenericAPI) StatedCost([]byte) (int64, bool) { return 0, false }

func (GenericAPI) EntityTag(http.Header, []byte) (string, bool) { return "", false }

func (GenericAPI) WhoAmIURL(*url.URL) *url.URL { return nil }

// ParseOwner takes the first of login, username and name for the owner's
// name, for an API configured with a "who am I" endpoint of its own.
func (GenericAPI) ParseOwner(body []byte) (Owner, error) {
	return parseOwner(body, func(v ownerJSON) string { return firstNonEmpty(v.Login, v.Username, v.Name) })
}

func (GenericAPI) RejectsToken(http.Header, []byte) bool { return true }

func (GenericAPI) StatusURL(*url.URL) *url.URL { return nil }

func (GenericAPI) ParseStatus([]byte) (map[string]ResourceLimit, error) {
	return nil, errors.ErrUnsupported
}

func (GenericAPI) ReadmeURL(RepoPage) (*url.URL, string, error) {
	return nil, "", errors.ErrUnsupported
}

func (GenericAPI) EncodedSlashes() bool { return false }

func (GenericAPI) TokenParams() []string { return nil }

func (GenericAPI) AppInstallations() bool { return false }

// GenericTokenEnv returns the token environment variable of a generic
// provider: the host's first label upper-cased plus _TOKEN
// (git.example.com → GIT_TOKEN), or, when the host is an IP address or a
// single label such as localhost, the provider name instead (corp →
// CORP_TOKEN). Characters other than ASCII letters and digits become '_', and
// a leading digit gets a '_' in front, so the result is a valid variable name.
func GenericTokenEnv(name, host string) string {
	label := name
	if host != "" && strings.Contains(host, ".") && !isIP(host) {
		label, _, _ = strings.Cut(host, ".")
	}
	var b strings.Builder
	for _, r := range strings.ToUpper(label) {
		if (r >= 'A' && r <= 'Z') || (r >= '0' && r <= '9') {
			b.WriteRune(r)
		} else {
			b.WriteByte('_')
		}
	}
	s := b.String()
	if s == "" || (s[0] >= '0' && s[0] <= '9') {
		s = "_" + s
	}
	return s + "_TOKEN"
}

func isIP(host string) bool {
	if strings.Contains(host, ":") {
		return true // only IPv6 literals contain colons in a hostname
	}
	for _, r := range host {
		if (r < '0' || r > '9') && r != '.' {
			return false
		}
	}
	return true
}
