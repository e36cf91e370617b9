package creds

import (
	"context"
	"errors"
	"fmt"
	"io"
	"net/http"
	"time"

	"github.com/ratekeeper/ratekeeper/provider"
)

// ErrInvalid is matched (errors.Is) by errors about a credential the server
// rejected.
var ErrInvalid = errors.New("credential rejected by the server")

// ValidationError reports a validation response that neither accepted nor
// rejected the credential (403 without a usable body, 404, 429, 5xx, ...).
// The credential's state is left as it was.
type ValidationError struct {
	Credential string // masked
	Method     string
	URL        string
	Status     string // e.g. "403 Forbidden"
	StatusCode int
}

func (e *ValidationError) Error() string {
	return fmt.Sprintf("%s: %s %s answered %s; the owner is unknown", e.Credential, e.Method, e.URL, e.Status)
}

// maxValidationBody bounds how much of a validation response is read.
const maxValidationBody = 1 << 20

// Validate asks p who owns c, through rt, and records the answer on c:
//
//   - 2xx: the owner is parsed and set (tokens of one owner then share one
//     bucket key), and an Unknown credential becomes Available; the owner's
//     bucket key is returned, such as "user:583231".
//   - 401: c is marked Invalid and the error matches [ErrInvalid].
//   - anything else: a [*ValidationError]; c's state is unchanged.
//
// An anonymous credential needs no request and returns "anonymous". A GitHub
// App installation is validated by minting its token (GET /user is not
// available to installations); a mint rejected with 401, 403 or 404 marks it
// invalid. A generic provider has no validation endpoint: the error matches
// [provider.ErrNoValidation] and c is unchanged.
//
// The time recorded for a state change is when the answer arrived, on the
// wall clock; ValidateAt takes the clock instead.
func Validate(ctx context.Context, rt http.RoundTripper, p *provider.Provider, c *Credential) (owner string, err error) {
	return ValidateAt(ctx, rt, p, c, time.Now)
}

// ValidateAt is Validate on the clock now: the caller's, so that a fake
// clock reaches the state changes it records (the transport passes its
// own).
func ValidateAt(ctx context.Context, rt http.RoundTripper, p *provider.Provider, c *Credential, now func() time.Time) (owner string, err error) {
	if c.provider != p.Name {
		return "", fmt.Errorf("%s belongs to provider %s, not %s; it is never sent to another provider", c.masked, c.provider, p.Name)
	}
	if st := c.Status(now()); st.State == Invalid {
		return "", fmt.Errorf("%s: %w: %s", c.masked, ErrInvalid, st.Reason)
	}
	switch c.kind {
	case Anonymous:
		c.MarkValidated(now())
		return c.BucketOwner(), nil
	case AppInstallation:
		if _, err := c.Token(ctx); err != nil {
			var ae *AppError
			if errors.As(err, &ae) {
				switch ae.Status {
				case http.StatusUnauthorized, http.StatusForbidden, http.StatusNotFound:
					reason := fmt.Sprintf("minting an installation token answered %d %s", ae.Status, http.StatusText(ae.Status))
					c.MarkInvalid(reason, now(), time.Time{})
					return "", fmt.Errorf("%s: %w: %s", c.masked, ErrInvalid, reason)
				}
			}
			return "", err
		}
		c.MarkValidated(now())
		return c.BucketOwner(), nil
	}
	req, err := p.ValidationRequest(ctx)
	if err != nil {
		return "", fmt.Errorf("cannot validate %s: %w", c.masked, err)
	}
	tok, err := c.Token(ctx)
	if err != nil {
		return "", err
	}
	p.Authorize(req.Header, tok)
	resp, err := rt.RoundTrip(req)
	if err != nil {
		return "", fmt.Errorf("%s: validating with %s %s: %w", c.masked, req.Method, req.URL.Redacted(), err)
	}
	body, readErr := io.ReadAll(io.LimitReader(resp.Body, maxValidationBody))
	resp.Body.Close()
	at := now()
	switch {
	case resp.StatusCode == http.StatusUnauthorized:
		reason := fmt.Sprintf("%s %s answered %s", req.Method, req.URL.Path, resp.Status)
		c.MarkInvalid(reason, at, time.Time{})
		return "", fmt.Errorf("%s: %w: %s", c.masked, ErrInvalid, reason)
	case resp.StatusCode < 200 || resp.StatusCode > 299:
		return "", &ValidationError{Credential: c.masked, Method: req.Method, URL: req.URL.Redacted(), Status: resp.Status, StatusCode: resp.StatusCode}
	case readErr != nil:
		return "", fmt.Errorf("%s: reading the answer of %s %s: %w", c.masked, req.Method, req.URL.Redacted(), readErr)
	}
	o, named := p.OwnerFromHeader(resp.Header)
	if !named {
		if o, err = p.ParseOwner(body); err != nil {
			return "", fmt.Errorf("%s: %w", c.masked, err)
		}
	}
	c.SetOwner(o)
	c.MarkValidated(at)
	return c.BucketOwner(), nil
}
