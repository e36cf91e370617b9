package transport_test

import (
	"testing"

	"github.com/ratekeeper/ratekeeper/transport"
	"github.com/ratekeeper/ratekeeper/transport/statetest"
)

// The memory State passes the suite every State must pass.
func TestMemoryStateSuite(t *testing.T) {
	statetest.Run(t, statetest.Backend{New: func(*testing.T) transport.State { return transport.NewMemoryState() }})
}
