package creds

import (
	"fmt"
	"time"
)

// State is where a credential stands.
type State int

const (
	// Unknown: not used or validated yet. Treat it as usable; the first
	// response tells.
	Unknown State = iota
	// Available: the server accepted the credential and it has quota.
	Available
	// Invalid: the server rejected the credential (Status.Reason says how).
	// Terminal: nothing brings it back in this process.
	Invalid
)

func (s State) String() string {
	switch s {
	case Unknown:
		return "unknown"
	case Available:
		return "available"
	case Invalid:
		return "invalid"
	}
	return fmt.Sprintf("State(%d)", int(s))
}

// MarshalText makes states readable in JSON.
func (s State) MarshalText() ([]byte, error) { return []byte(s.String()), nil }

// Status is a credential's state with its details.
type Status struct {
	State  State
	Reason string    // Invalid: why, e.g. "GET /user answered 401 Unauthorized"
	Since  time.Time // when the state was entered (zero for Unknown)
	// Until is when an Invalid mark is to be tried again (zero: never):
	// a refusal can be a provider's passing trouble, and a token can be
	// fixed (re-granted, un-suspended) without being replaced.
	Until time.Time
}

// Status returns the credential's status at now. An invalid mark whose
// Until has come reads as Unknown since then: the token is tried again.
// Whether its quota is spent is not a credential's state: quota belongs to
// the buckets of its owner, one per resource, which the transport keeps.
func (c *Credential) Status(now time.Time) Status {
	c.st.mu.Lock()
	defer c.st.mu.Unlock()
	return c.st.statusAt(now)
}

func (s *state) statusAt(now time.Time) Status {
	st := s.status
	if st.State == Invalid && !st.Until.IsZero() && !now.Before(st.Until) {
		return Status{State: Unknown, Since: st.Until}
	}
	return st
}

// State returns the credential's state at now.
func (c *Credential) State(now time.Time) State { return c.Status(now).State }

// Eligible reports whether the credential may be used at now: it is not
// invalid.
func (c *Credential) Eligible(now time.Time) bool { return c.State(now) != Invalid }

// MarkValidated records that the server accepted the credential (a "who am
// I" answer, or any answer that is not a refusal of the token): Unknown
// becomes Available. An invalid credential stays invalid. It reports
// whether the state changed.
func (c *Credential) MarkValidated(now time.Time) bool {
	return c.move(now, func(s State) bool { return s == Unknown }, Status{State: Available, Since: now})
}

// MarkInvalid records that the server rejected the credential, for the given
// reason (which must not contain the token), until retry (zero: for good;
// see Status.Until). It reports whether the state changed: true only when
// it was not already invalid, so a caller can emit one event.
func (c *Credential) MarkInvalid(reason string, now, retry time.Time) bool {
	return c.move(now, func(s State) bool { return s != Invalid }, Status{State: Invalid, Reason: reason, Since: now, Until: retry})
}

// RetryInvalidAt sets when an invalid mark that has none is to be tried
// again (see Status.Until); a transport applies its own period to marks
// made by Validate this way.
func (c *Credential) RetryInvalidAt(retry time.Time) {
	c.st.mu.Lock()
	defer c.st.mu.Unlock()
	if c.st.status.State == Invalid && c.st.status.Until.IsZero() {
		c.st.status.Until = retry
	}
}

// ClearInvalid forgets an invalid mark, so the credential is tried again
// (a user asked, as `ratekeeper status --live` does). It reports whether
// there was one.
func (c *Credential) ClearInvalid(now time.Time) bool {
	return c.move(now, func(s State) bool { return s == Invalid }, Status{State: Unknown, Since: now})
}

// move is every transition of the state machine: under the lock, when the
// state at now is one that from accepts, the status becomes to. It reports
// whether it did.
func (c *Credential) move(now time.Time, from func(State) bool, to Status) bool {
	c.st.mu.Lock()
	defer c.st.mu.Unlock()
	if !from(c.st.statusAt(now).State) {
		return false
	}
	c.st.status = to
	return true
}
