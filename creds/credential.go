package creds

import (
	"context"
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"fmt"
	"io"
	"log/slog"
	"sync"

	"github.com/ratekeeper/ratekeeper/provider"
)

// Kind says where a credential's token comes from.
type Kind int

const (
	// Static is a token given by the user (a personal access token, a bot's
	// token, an OAuth token).
	Static Kind = iota
	// AppInstallation is a GitHub App installation whose short-lived token is
	// minted and refreshed on demand.
	AppInstallation
	// Anonymous sends no token: the server's anonymous limits apply.
	Anonymous
)

func (k Kind) String() string {
	switch k {
	case Static:
		return "token"
	case AppInstallation:
		return "app-installation"
	case Anonymous:
		return "anonymous"
	}
	return fmt.Sprintf("Kind(%d)", int(k))
}

// MarshalText makes kinds readable in JSON.
func (k Kind) MarshalText() ([]byte, error) { return []byte(k.String()), nil }

// Credential is one way of authenticating to one provider. Its token is
// obtained only with [Credential.Token]; every printable form is masked.
// A Credential is safe for concurrent use.
type Credential struct {
	index    int
	provider string
	kind     Kind
	source   string // where it came from, e.g. "GITHUB_TOKEN entry #2"; never the token
	// token returns a Static credential's token. A closure, because nothing
	// that prints or encodes by reflection (fmt's %v of an enclosing struct,
	// its bad-verb fallback, spew, go-cmp) can see what a closure captured;
	// a string field, even behind a pointer, can be printed.
	token    func() string
	mint     func(context.Context) (string, error) // AppInstallation only; a func for the same reason
	inst     *installation                         // AppInstallation only
	masked   string
	identity string // bucket identity when the owner is unknown
	caller   bool   // a caller's own token (NewCallerToken)
	oneOwner bool   // the token sees one resource owner's private repositories (OneResourceOwner)
	st       *state
}

type state struct {
	mu       sync.Mutex
	status   Status
	owner    provider.Owner
	ownerKey string // bucket owner when known: from validation, an App, or inference
}

// NewToken returns a static credential holding token for the named provider.
// index is its stable position in its pool (shown as "#index"), source says
// where it came from for messages ("GITHUB_TOKEN entry #2").
func NewToken(providerName string, index int, token, source string) *Credential {
	sum := sha256.Sum256([]byte(token))
	return &Credential{
		index:    index,
		provider: providerName,
		kind:     Static,
		source:   source,
		token:    func() string { return token },
		masked:   fmt.Sprintf("#%d %s", index, MaskToken(token)),
		// A truncated hash names the token's bucket across processes (the
		// shared store) without revealing it.
		identity: "token:" + hex.EncodeToString(sum[:8]),
		oneOwner: TokenPrefix(token) == "github_pat_",
		st:       &state{},
	}
}

// NewCallerToken returns a credential for a token a caller put on its own
// request (its Authorization header, user:pass@ in its URL), so that what
// the request spends is counted against that token rather than a pool's.
// It belongs to no pool and has index 0; it is masked as
// "own credential ghp_…a1b2", and its identity is the token's, like
// [NewToken]'s: one token is one bucket, whoever sends it.
func NewCallerToken(providerName, token, source string) *Credential {
	c := NewToken(providerName, 0, token, source)
	c.masked = "own credential " + MaskToken(token)
	c.caller = true
	return c
}

// Caller reports whether the credential is a caller's own
// ([NewCallerToken]): ratekeeper never sends it, the caller's request
// carries it.
func (c *Credential) Caller() bool { return c.caller }

// NewAnonymous returns a credential that sends no token.
func NewAnonymous(providerName string, index int) *Credential {
	return &Credential{
		index:    index,
		provider: providerName,
		kind:     Anonymous,
		source:   "no token configured",
		masked:   fmt.Sprintf("#%d anonymous", index),
		identity: "anonymous",
		st:       &state{},
	}
}

// Index returns the credential's stable position in its pool, from 1.
func (c *Credential) Index() int { return c.index }

// Provider returns the name of the provider the credential belongs to.
func (c *Credential) Provider() string { return c.provider }

// Kind says where the token comes from.
func (c *Credential) Kind() Kind { return c.kind }

// OneResourceOwner reports whether the token sees the private resources
// of one account only: a GitHub fine-grained personal access token
// (github_pat_) has exactly one resource owner, an organisation or a user,
// chosen when it was made. Like any token it reads every public
// repository.
func (c *Credential) OneResourceOwner() bool { return c.oneOwner }

// Source says where the credential came from ("GITHUB_TOKEN entry #2",
// "app 12 installation 34"), for messages.
func (c *Credential) Source() string { return c.source }

// Masked returns the printable form, such as "#2 ghp_…a1b2",
// "#1 anonymous" or "#3 app:12/installation:34".
func (c *Credential) Masked() string { return c.masked }

// Token returns the token to send, minting or refreshing it first for an App
// installation. An anonymous credential returns "" and no error. Errors never
// contain token text.
func (c *Credential) Token(ctx context.Context) (string, error) {
	switch c.kind {
	case Static:
		return c.token(), nil
	case AppInstallation:
		tok, err := c.mint(ctx)
		if err != nil {
			return "", fmt.Errorf("%s: minting installation token: %w", c.masked, err)
		}
		return tok, nil
	}
	return "", nil
}

// Account returns the login of the account (organisation or user) an App
// installation is on, the only one whose repositories it sees, or "" for
// other credentials and an installation whose account is not known yet.
func (c *Credential) Account() string {
	if c.inst == nil {
		return ""
	}
	return c.inst.Account()
}

// Mints returns how many tokens this process minted for an App
// installation (0 for other credentials).
func (c *Credential) Mints() int {
	if c.inst == nil {
		return 0
	}
	return c.inst.Mints()
}

// Owner returns the account the token belongs to, or the zero Owner when it
// has not been learnt.
func (c *Credential) Owner() provider.Owner {
	c.st.mu.Lock()
	defer c.st.mu.Unlock()
	return c.st.owner
}

// SetOwner records who owns the token (from [Validate] or a status call); from
// then on [Credential.BucketOwner] is the owner's key, shared by every token
// of that owner.
func (c *Credential) SetOwner(o provider.Owner) {
	if o.Key() == "" || c.kind == AppInstallation {
		return // an installation's bucket is the installation, whoever acts through it
	}
	c.st.mu.Lock()
	defer c.st.mu.Unlock()
	c.st.owner, c.st.ownerKey = o, o.Key()
}

// ShareBucketWith records that c spends the same server-side bucket as
// other, as inferred by [SameBucket], unless c's owner is already known.
func (c *Credential) ShareBucketWith(other *Credential) {
	key := other.BucketOwner()
	c.st.mu.Lock()
	defer c.st.mu.Unlock()
	if c.st.ownerKey == "" && c.kind == Static {
		c.st.ownerKey = key
	}
}

// KeepOwnBucket records that c spends a bucket of its own, as inferred by
// a [Learner], unless c's bucket is already known.
func (c *Credential) KeepOwnBucket() {
	c.st.mu.Lock()
	defer c.st.mu.Unlock()
	if c.st.ownerKey == "" && c.kind == Static {
		c.st.ownerKey = c.identity
	}
}

// SetBucketOwner records the bucket owner key learnt for c earlier (by
// inference, remembered in a shared store), unless c's owner is known.
func (c *Credential) SetBucketOwner(key string) {
	c.st.mu.Lock()
	defer c.st.mu.Unlock()
	if key != "" && c.st.owner.Key() == "" && c.kind == Static {
		c.st.ownerKey = key
	}
}

// BucketKnown reports whether c's bucket owner is known: an owner learnt
// by validation, a bucket inferred from answers, an App installation or
// anonymous access. Until then BucketOwner is a per-token identity that
// may be wrong (two tokens of one user).
func (c *Credential) BucketKnown() bool {
	if c.kind != Static {
		return true
	}
	c.st.mu.Lock()
	defer c.st.mu.Unlock()
	return c.st.ownerKey != ""
}

// ID returns an identity of the credential that is the same in every
// process and never changes: "token:" and 16 hex digits of the token's
// SHA-256, "app:ID/installation:ID", or "anonymous". It reveals nothing
// usable; shared stores key what they know of the credential by it.
func (c *Credential) ID() string { return c.identity }

// BucketOwner returns the identity of the server-side bucket owner the
// credential spends from, for bucket keys (provider, owner, resource): the
// owner's key ("user:583231") once known, "app:ID/installation:ID" for an App
// installation, "anonymous" without a token, else a per-token identity
// ("token:" and 16 hex digits of the token's SHA-256) that is the same in
// every process using the token and reveals nothing usable.
func (c *Credential) BucketOwner() string {
	c.st.mu.Lock()
	defer c.st.mu.Unlock()
	if c.st.ownerKey != "" {
		return c.st.ownerKey
	}
	return c.identity
}

// The printing methods have value receivers so that a Credential copied
// out of its pointer is masked too.

// String returns [Credential.Masked].
func (c Credential) String() string { return c.masked }

// GoString returns [Credential.Masked], so %#v cannot reveal the token.
func (c Credential) GoString() string { return c.masked }

// Format prints [Credential.Masked] for every verb, so no fmt verb (%v, %+v,
// %#v, %s, %q, %x, ...) can reveal the token.
func (c Credential) Format(f fmt.State, verb rune) {
	if verb == 'q' {
		fmt.Fprintf(f, "%q", c.masked)
		return
	}
	io.WriteString(f, c.masked)
}

// LogValue makes slog print the masked form, the owner when known and the
// provider.
func (c Credential) LogValue() slog.Value {
	attrs := []slog.Attr{slog.String("id", c.masked), slog.String("provider", c.provider)}
	if o := c.Owner(); o.Key() != "" {
		attrs = append(attrs, slog.String("owner", o.String()))
	}
	return slog.GroupValue(attrs...)
}

// credentialJSON is what a Credential looks like in JSON.
type credentialJSON struct {
	Index    int    `json:"index"`
	Provider string `json:"provider"`
	Kind     Kind   `json:"kind"`
	Masked   string `json:"masked"`
	Source   string `json:"source"`
	Owner    string `json:"owner,omitempty"`
	Account  string `json:"account,omitempty"`
	Bucket   string `json:"bucket_owner"`
}

// MarshalJSON encodes the masked form and metadata, never the token.
func (c Credential) MarshalJSON() ([]byte, error) {
	return json.Marshal(credentialJSON{
		Index:    c.index,
		Provider: c.provider,
		Kind:     c.kind,
		Masked:   c.masked,
		Source:   c.source,
		Owner:    c.Owner().String(),
		Account:  c.Account(),
		Bucket:   c.BucketOwner(),
	})
}

var (
	_ fmt.Formatter  = Credential{}
	_ slog.LogValuer = Credential{}
	_ json.Marshaler = Credential{}
	_ fmt.Formatter  = (*Credential)(nil)
	_ fmt.GoStringer = (*Credential)(nil)
	_ slog.LogValuer = (*Credential)(nil)
	_ json.Marshaler = (*Credential)(nil)
)
