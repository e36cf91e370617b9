package provider

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"net/http"
	"net/url"
	"time"
)

// Owner is who a token belongs to, as the provider's "who am I" endpoint
// reports it. Tokens with the same owner share one server-side bucket.
type Owner struct {
	ID   string // stable id (GitHub, GitLab, Gitea: the numeric user id; Hugging Face: the account id)
	Name string // login or user name, for display
}

// Key returns the owner's bucket identity, "user:" followed by the id (or the
// name when there is no id), or "" for an unknown owner.
func (o Owner) Key() string {
	switch {
	case o.ID != "":
		return "user:" + o.ID
	case o.Name != "":
		return "user:" + o.Name
	}
	return ""
}

// String returns "name (id ID)", or whichever part is known.
func (o Owner) String() string {
	switch {
	case o.Name != "" && o.ID != "":
		return o.Name + " (id " + o.ID + ")"
	case o.Name != "":
		return o.Name
	}
	return o.ID
}

// errNoOwnerInBody is the answer of an API whose owner is named in a
// header (see [HeaderOwner]) to a body.
var errNoOwnerInBody = errors.New("the answer names the owner in a header, not in its body")

// OwnerFromHeader is the owner an answer's header names, for an API that
// names it there (see [HeaderOwner]).
func (p *Provider) OwnerFromHeader(h http.Header) (Owner, bool) {
	if ho, ok := p.api.(HeaderOwner); ok {
		return ho.OwnerFromHeader(h)
	}
	return Owner{}, false
}

// OwnerInHeader reports whether the API's answers name the owner of the
// token in a header (see [HeaderOwner]): asking "who am I" once per token
// then tells which tokens share a bucket, without comparing counters.
func (p *Provider) OwnerInHeader() bool {
	_, ok := p.api.(HeaderOwner)
	return ok
}

// SetDefaultHeaders sets on h each header the API needs on every request
// (see [DefaultHeaders]) that h does not carry already.
func (p *Provider) SetDefaultHeaders(h http.Header) {
	dh, ok := p.api.(DefaultHeaders)
	if !ok {
		return
	}
	for k, v := range dh.DefaultHeaders() {
		if _, set := h[k]; !set && len(v) > 0 {
			h[k] = []string{v[0]}
		}
	}
}

// ErrNoValidation is returned by [Provider.ValidationRequest] for providers
// without a known "who am I" endpoint (generic ones).
var ErrNoValidation = errors.New("provider has no validation endpoint")

// ValidationURL returns the endpoint that tells who owns a token: GET /user
// for GitHub, GitLab and Gitea, GET /api/whoami-v2 for Hugging Face. ok is
// false for an API without one (generic ones).
func (p *Provider) ValidationURL() (u *url.URL, ok bool) {
	u = p.api.WhoAmIURL(p.base)
	return u, u != nil
}

// ValidationRequest builds (but does not send or authorize) the request that
// validates a token and names its owner. It fails with [ErrNoValidation] for
// a generic provider.
func (p *Provider) ValidationRequest(ctx context.Context) (*http.Request, error) {
	u, ok := p.ValidationURL()
	if !ok {
		return nil, fmt.Errorf("%s: %w", p.Name, ErrNoValidation)
	}
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, u.String(), nil)
	if err != nil {
		return nil, err
	}
	req.Header.Set("Accept", "application/json")
	p.SetDefaultHeaders(req.Header)
	return req, nil
}

// ParseOwner reads the body of a successful validation response: GitHub and
// Gitea {"login", "id"}, GitLab {"username", "id"}, Hugging Face whoami-v2
// {"name", "id"}. It fails when the body is not JSON or names nobody.
func (p *Provider) ParseOwner(body []byte) (Owner, error) {
	o, err := p.api.ParseOwner(body)
	if err != nil {
		return Owner{}, fmt.Errorf("%s: %w", p.Name, err)
	}
	return o, nil
}

// ownerJSON holds the fields "who am I" answers name an owner with.
type ownerJSON struct {
	Login    string          `json:"login"`
	Username string          `json:"username"`
	Name     string          `json:"name"`
	ID       json.RawMessage `json:"id"`
}

// parseOwner reads a "who am I" answer whose owner's name is the field
// name picks, and its id.
func parseOwner(body []byte, name func(ownerJSON) string) (Owner, error) {
	var v ownerJSON
	if err := json.Unmarshal(body, &v); err != nil {
		return Owner{}, fmt.Errorf("validation response is not the expected JSON object: %v", err)
	}
	o := Owner{Name: name(v), ID: rawID(v.ID)}
	if o.Key() == "" {
		return Owner{}, errors.New("validation response names no owner (no login, username, name or id)")
	}
	return o, nil
}

// rawID renders a JSON id that may be a number or a string.
func rawID(raw json.RawMessage) string {
	raw = bytes.TrimSpace(raw)
	if len(raw) == 0 || string(raw) == "null" {
		return ""
	}
	var s string
	if json.Unmarshal(raw, &s) == nil {
		return s
	}
	var n json.Number
	if json.Unmarshal(raw, &n) == nil {
		return n.String()
	}
	return ""
}

func firstNonEmpty(ss ...string) string {
	for _, s := range ss {
		if s != "" {
			return s
		}
	}
	return ""
}

// ResourceLimit is one bucket's state as a status endpoint reports it.
type ResourceLimit struct {
	Resource  string
	Limit     int
	Remaining int
	Used      int
	Reset     time.Time
}

// StatusURL returns an endpoint that reports every bucket's state without
// spending any: GitHub's GET /rate_limit. ok is false for APIs without one.
func (p *Provider) StatusURL() (u *url.URL, ok bool) {
	u = p.api.StatusURL(p.base)
	return u, u != nil
}

// ParseStatus reads the answer of the provider's [Provider.StatusURL] into
// its buckets, keyed by resource name.
func (p *Provider) ParseStatus(body []byte) (map[string]ResourceLimit, error) {
	return p.api.ParseStatus(body)
}

// MayRejectCredential reports whether a 401 answer may mean the token
// itself was refused, as each API says it: any 401 on GitHub ("Bad
// credentials"), GitLab ("401 Unauthorized", invalid_token), Gitea and
// generic APIs; on Hugging Face only with its invalid-credentials message,
// since it answers 401 for a repository that does not exist or is private.
// body is the answer's first bytes. A true answer is still only a
// suspicion: the transport confirms it with the "who am I" request before
// marking the token invalid.
func (p *Provider) MayRejectCredential(status int, h http.Header, body []byte) bool {
	return status == http.StatusUnauthorized && p.api.RejectsToken(h, body)
}
