package transport

import (
	"context"
	"fmt"

	"github.com/ratekeeper/ratekeeper/creds"
)

// Ready reports whether the transport can serve requests now, for a
// readiness probe (/readyz): nil when it can, else an error saying why in
// a sentence an operator can act on. It asks Options.Ping once, with ctx
// (give it a short deadline: a probe must not wait out an outage the way
// requests do), and looks at the credentials of the named providers (none:
// every provider of the registry): each must have loaded, and a provider
// with tokens must have one its server has not rejected. It sends nothing
// and reads no quota.
func (t *Transport) Ready(ctx context.Context, providers ...string) error {
	if t.opts.Ping != nil {
		if err := t.opts.Ping(ctx); err != nil {
			return fmt.Errorf("the database does not answer: %v", err)
		}
	}
	now := t.opts.Now()
	for _, p := range t.providers(providers) {
		pool, err := t.poolFor(p)
		if err != nil {
			return fmt.Errorf("%s: credentials not loaded: %v", p.Name, err)
		}
		rejected, usable := 0, false
		for _, c := range pool.Credentials() {
			if c.Kind() != creds.Anonymous && c.State(now) == creds.Invalid {
				rejected++
				continue
			}
			usable = true
		}
		// The reason names no credential, not even masked: a probe needs
		// no key. status says which and why.
		if !usable && rejected > 0 {
			return fmt.Errorf("%s: the server rejected every token (%d; 'ratekeeper status' or /status says why)", p.Name, rejected)
		}
	}
	return nil
}
