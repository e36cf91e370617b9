package transport

import (
	"fmt"
	"strings"
	"time"
)

// WaitError is returned instead of waiting when the quota a request needs
// returns later than the transport's MaxWait. It carries when the quota
// returns, so a caller can schedule the work for then: package tasks turns
// it into a durable sleep (it finds it with errors.As against any error
// with a RetryAt method).
type WaitError struct {
	Provider string
	Resource string
	// Credential is the masked credential that could go soonest.
	Credential string
	// Until is when the quota returns; Wait is how far away that was.
	Until   time.Time
	Wait    time.Duration
	MaxWait time.Duration
}

func (e *WaitError) Error() string {
	return fmt.Sprintf("ratekeeper: %s %s quota returns at %s (in %s), beyond the max wait of %s",
		e.Provider, e.Resource, e.Until.UTC().Format(time.RFC3339), e.Wait.Round(time.Second), e.MaxWait)
}

// RetryAt is when the request could be sent.
func (e *WaitError) RetryAt() time.Time { return e.Until }

// NoCredentialError is returned when every credential of a provider has
// been rejected by the server.
type NoCredentialError struct {
	Provider string
	// Invalid lists the masked credentials and why each was rejected.
	Invalid []string
}

func (e *NoCredentialError) Error() string {
	return fmt.Sprintf("ratekeeper: no usable credential for %s: %s", e.Provider, strings.Join(e.Invalid, "; "))
}
