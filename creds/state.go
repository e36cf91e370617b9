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
	// Exhausted: the credential's quota is spent until Status.Until.
	Exhausted
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
	case Exhausted:
		return "exhausted"
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
	Until  time.Time // Exhausted: when the quota returns
	Reason string    // Invalid: why, e.g. "GET /user answered 401 Unauthorized"
	Since  time.Time // when the state was entered (zero for Unknown)
}

// Status returns the credential's status at now. An exhaustion whose time has
// come reads as Available since its Until: the window has reset.
func (c *Credential) Status(now time.Time) Status {
	c.st.mu.Lock()
	defer c.st.mu.Unlock()
	return c.st.statusAt(now)
}

func (s *state) statusAt(now time.Time) Status {
	st := s.status
	if st.State == Exhausted && !now.Before(st.Until) {
		return Status{State: Available, Since: st.Until}
	}
	return st
}

// State returns the credential's state at now.
func (c *Credential) State(now time.Time) State { return c.Status(now).State }

// Eligible reports whether the credential may be used at now: it is not
// invalid and not exhausted past now.
func (c *Credential) Eligible(now time.Time) bool {
	s := c.State(now)
	return s != Invalid && s != Exhausted
}

// MarkValidated records that the server accepted the credential: Unknown
// becomes Available. Other states are left alone, because acceptance says
// nothing about quota. It reports whether the state changed.
func (c *Credential) MarkValidated(now time.Time) bool {
	c.st.mu.Lock()
	defer c.st.mu.Unlock()
	if c.st.status.State != Unknown {
		return false
	}
	c.st.status = Status{State: Available, Since: now}
	return true
}

// MarkAvailable records that a response showed the credential accepted and
// with quota left: Unknown and Exhausted become Available. Call it only for a
// response that is current (out-of-order readings are sorted out before, by
// the quota logic). An invalid credential stays invalid. It reports whether
// the state changed.
func (c *Credential) MarkAvailable(now time.Time) bool {
	c.st.mu.Lock()
	defer c.st.mu.Unlock()
	cur := c.st.statusAt(now)
	switch cur.State {
	case Invalid:
		return false
	case Available:
		// An expired exhaustion already reads as available; settle it.
		c.st.status = cur
		return false
	}
	c.st.status = Status{State: Available, Since: now}
	return true
}

// MarkExhausted records that the credential's quota is spent until until.
// Exhaustions only lengthen: a reading with an earlier until than the one
// recorded is stale (responses arrive out of order) and is ignored, as is an
// until that is not after now. An invalid credential stays invalid. It reports
// whether the status changed.
func (c *Credential) MarkExhausted(until, now time.Time) bool {
	c.st.mu.Lock()
	defer c.st.mu.Unlock()
	cur := c.st.statusAt(now)
	switch {
	case cur.State == Invalid, !until.After(now):
		return false
	case cur.State == Exhausted && !until.After(cur.Until):
		return false
	}
	since := now
	if cur.State == Exhausted {
		since = cur.Since
	}
	c.st.status = Status{State: Exhausted, Until: until, Since: since}
	return true
}

// MarkInvalid records that the server rejected the credential, for the given
// reason (which must not contain the token). Invalid is terminal. It reports
// whether the state changed: true only the first time, so a caller can emit
// one event.
func (c *Credential) MarkInvalid(reason string, now time.Time) bool {
	c.st.mu.Lock()
	defer c.st.mu.Unlock()
	if c.st.status.State == Invalid {
		return false
	}
	c.st.status = Status{State: Invalid, Reason: reason, Since: now}
	return true
}
