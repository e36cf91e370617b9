// Package provider knows what ratekeeper knows about each API it talks to:
// where it lives, how a token is attached, which rate-limit bucket a request
// spends, what to assume when a server says nothing, which secondary limits
// apply, how to ask who owns a token and how to read a free status endpoint.
//
// The package is pure data and decisions. It builds requests but never sends
// one; the transport and the credential validation in package creds do.
//
// # One file per API
//
// What is known of each kind of API is one value implementing [API], in a
// file of its own: github.go, gitlab.go, huggingface.go, gitea.go, and
// generic.go for everything else. The registry of APIs (api.go) is the one
// place a kind is looked up; a [Provider] keeps its API and asks it, so no
// code elsewhere compares kinds. A new API is a new file and one line in
// that registry, or, from outside the package, a type embedding
// [GenericAPI] given to [Register].
//
// # Kinds and built-in providers
//
// A provider has a name (what users type) and a kind (what dialect it speaks):
//
//	kind         names                        built-in base URL
//	github       github                       https://api.github.com (GraphQL https://api.github.com/graphql)
//	gitlab       gitlab                       https://gitlab.com/api/v4
//	huggingface  huggingface, hf              https://huggingface.co (API under /api)
//	gitea        gitea, codeberg, forgejo     codeberg: https://codeberg.org/api/v1
//	generic      any other name               —
//
// The name "hf" is another spelling of "huggingface". The names gitea and
// forgejo have no default base URL: they need one (a flag or the config file).
//
// A base URL is the root of the API: https://HOST/api/v3 for GitHub
// Enterprise Server, https://HOST/api/v4 for a self-managed GitLab,
// https://HOST/api/v1 for Gitea and Forgejo. A github-kind provider whose base
// URL ends in /api/v3 also owns https://HOST/api/graphql, so GraphQL requests
// to a GitHub Enterprise Server carry its token too.
//
// # Matching
//
// [Registry.Match] picks the provider whose base URL is the longest prefix of
// a request URL: scheme, host and port must be equal (a missing port is the
// scheme's default), and the base path must be a prefix on a segment boundary
// (/gh matches /gh and /gh/x, never /ghx). Several providers can therefore
// share one host, such as a simulator serving http://127.0.0.1:8080/gh and
// http://127.0.0.1:8080/gl. [Provider.Owns] answers the same question for one
// provider and is meant to be asked on every hop: a token is attached only to
// URLs its provider owns, so a redirect to another host carries none.
//
// # Token environment variables
//
//	github       GITHUB_TOKEN, GH_TOKEN
//	gitlab       GITLAB_TOKEN
//	huggingface  HF_TOKEN, HUGGINGFACE_TOKEN
//	gitea        CODEBERG_TOKEN, GITEA_TOKEN, FORGEJO_TOKEN
//	generic      the first label of the host, upper-cased, plus _TOKEN:
//	             git.example.com → GIT_TOKEN. When the host is an IP address
//	             or has a single label (localhost), the provider's name is used
//	             instead: --provider corp=http://127.0.0.1:9000 → CORP_TOKEN.
//	             Characters other than letters and digits become underscores.
//
// The token_env key of the config file replaces the list.
//
// # Configuration
//
// Providers come from three places, later ones refining earlier ones:
// [Defaults], the optional TOML file ([ParseConfig], [LoadConfig],
// [Registry.ApplyConfig]) and the repeatable --provider NAME=BASEURL flag
// ([ParseProviderFlag], [Registry.ApplyFlag]). A flag naming a provider that
// already exists replaces only its base URL and keeps the rest of its
// configuration.
//
// # GitHub: entity tags and GraphQL costs
//
// github.go (with the cost formula in github_graphql.go) holds what the
// GitHub API does beyond its headers:
// [Provider.EntityTag], the tag api.github.com gives an answer (a SHA-256
// of the request's Accept, Authorization and Cookie values and the body,
// so it differs per token), which lets a client revalidate a stored answer
// with any token; and [Provider.ClassifyGraphQL] with [GraphQLCost], what a
// GraphQL query costs in points (its shape, the published formula's cost,
// whether it is a mutation) and what an answer says it cost.
//
// Layer 0 of docs/architecture.md: it owns what is known of each API, and
// must not send requests.
package provider
