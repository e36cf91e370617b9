package provider

import (
	"bytes"
	"fmt"
	"net/http"
	"net/url"
	"strings"
)

// HuggingFace is the kind of the Hugging Face Hub.
const HuggingFace Kind = "huggingface"

// HuggingFaceAPI is the built-in huggingface provider's base URL.
const HuggingFaceAPI = "https://huggingface.co"

// huggingFaceAPI is what ratekeeper knows of the Hugging Face Hub: a
// Bearer token from HF_TOKEN or HUGGINGFACE_TOKEN, three buckets (api,
// resolvers, pages) over fixed 5-minute windows, "who am I" at
// /api/whoami-v2, and a 401 that refuses the token only when it says so.
type huggingFaceAPI struct{ GenericAPI }

func (huggingFaceAPI) Kind() Kind { return HuggingFace }

var hfAliases = []string{"hf"}

func (huggingFaceAPI) Aliases() []string { return hfAliases }

// Builtin: "hf" is another spelling of the provider's name.
func (huggingFaceAPI) Builtin() Builtin {
	return Builtin{Name: "huggingface", BaseURL: HuggingFaceAPI, Aliases: hfAliases}
}

func (huggingFaceAPI) TokenEnv(string, *url.URL) []string {
	return []string{"HF_TOKEN", "HUGGINGFACE_TOKEN"}
}

// WebURL is the base itself: the Hub serves pages and API on one host.
func (huggingFaceAPI) WebURL(base *url.URL) *url.URL { return below(base, "") }

// Classify follows the Hub's three buckets: Hub APIs under /api,
// resolvers (any path with a /resolve/ segment) and web pages.
// Group is none: Hugging Face announces each of its buckets (api,
// resolvers, pages) in its headers.
func (huggingFaceAPI) Group(string, string) string { return "" }

func (huggingFaceAPI) Classify(method, rel string) Request {
	r := Request{Resource: "pages", Write: isWrite(method)}
	switch {
	case rel == "/api" || strings.HasPrefix(rel, "/api/"):
		r.Resource = "api"
	case strings.Contains(rel, "/resolve/") || strings.HasSuffix(rel, "/resolve"):
		r.Resource = "resolvers"
	}
	return r
}

// WhoAmIURL is GET /api/whoami-v2, answered {"name", "id"}.
func (huggingFaceAPI) WhoAmIURL(base *url.URL) *url.URL { return below(base, "/api/whoami-v2") }

func (huggingFaceAPI) ParseOwner(body []byte) (Owner, error) {
	return parseOwner(body, func(v ownerJSON) string { return v.Name })
}

// hfInvalidCredentials is the message Hugging Face gives (in X-Error-Message
// and the body) when it refuses the token itself; its own client reads any
// other 401 as "repository not found".
const hfInvalidCredentials = "Invalid credentials in Authorization header"

func (huggingFaceAPI) RejectsToken(h http.Header, body []byte) bool {
	return h.Get("X-Error-Message") == hfInvalidCredentials || bytes.Contains(body, []byte(hfInvalidCredentials))
}

// ReadmeURL is GET {base}/{repo id}/resolve/main/README.md, with datasets/
// and spaces/ kept in the repo id: a model card is README.md on the main
// branch.
func (huggingFaceAPI) ReadmeURL(page RepoPage) (*url.URL, string, error) {
	id, err := huggingFaceRepoID(page.Path)
	if err != nil {
		return nil, "", fmt.Errorf("repository URL %s: %v; expected e.g. %s/owner/repo", page.URL.Redacted(), err, page.Web)
	}
	return below(page.Base, "/"+id+"/resolve/main/README.md"), "", nil
}

// huggingFaceRepoID extracts "owner/name", "datasets/owner/name" or
// "spaces/owner/name" (or a legacy single-segment model id) from a Hub page's
// path segments.
func huggingFaceRepoID(seg []string) (string, error) {
	if len(seg) == 0 {
		return "", fmt.Errorf("names no repository")
	}
	if seg[0] == "datasets" || seg[0] == "spaces" {
		if len(seg) < 3 {
			return "", fmt.Errorf("names no %s repository (owner/name)", seg[0])
		}
		return seg[0] + "/" + seg[1] + "/" + seg[2], nil
	}
	if len(seg) == 1 || isHubPageSegment(seg[1]) {
		return seg[0], nil // legacy model ids have no owner, e.g. gpt2
	}
	return seg[0] + "/" + seg[1], nil
}

// isHubPageSegment reports whether s is a sub-page of a Hub repository rather
// than the second half of its id.
func isHubPageSegment(s string) bool {
	switch s {
	case "tree", "blob", "resolve", "raw", "commits", "commit", "discussions", "settings":
		return true
	}
	return false
}
