package demo

import (
	"fmt"
	"time"

	"github.com/ratekeeper/ratekeeper/sim"
)

// Token is one credential the demo gives the client. Its text is fake and
// never printed; output shows the client's masked form.
type Token struct {
	Secret string
	// Owner is the simulated user the token belongs to; "" means the
	// server does not know it (a revoked token: every use is a 401).
	Owner string
}

// Valid reports whether the simulated server accepts the token.
func (t Token) Valid() bool { return t.Owner != "" }

// Scenario is the simulated API and the tokens the demo runs against.
type Scenario struct {
	// Tokens in the order the client gets them (#1 first).
	Tokens []Token
	// Limit requests per owner per Window, rolling windows as GitHub's:
	// a window opens at an owner's first request and resets Window later.
	Limit  int64
	Window time.Duration
	// Latency delays every answer, as a real network would.
	Latency time.Duration
}

// NewScenario returns the demo's five GitHub tokens: #1 and #2 belong to
// the same user (so they share one bucket, which the client must detect),
// #3 and #4 to two other users, and #5 is revoked. Three owners with
// limit requests each per window make the physical limit.
func NewScenario(limit int64, window, latency time.Duration) Scenario {
	return Scenario{
		Tokens: []Token{
			{Secret: "demo-alice-key-0001", Owner: "alice"},
			{Secret: "demo-alice-key-0002", Owner: "alice"},
			{Secret: "demo-bob-key-0003", Owner: "bob"},
			{Secret: "demo-carol-key-0004", Owner: "carol"},
			{Secret: "demo-revoked-key-0005"},
		},
		Limit: limit, Window: window, Latency: latency,
	}
}

// APIName is the simulated API's name and the client's provider name.
const APIName = "github"

// apiPrefix is where the simulated API is mounted on the server.
const apiPrefix = "/github"

// Owners returns the distinct owners of the valid tokens, in token order:
// the independent buckets, K in the physical limit K·L/W.
func (s Scenario) Owners() []string {
	var owners []string
	seen := map[string]bool{}
	for _, t := range s.Tokens {
		if t.Valid() && !seen[t.Owner] {
			seen[t.Owner] = true
			owners = append(owners, t.Owner)
		}
	}
	return owners
}

// SharedOwners returns, for every owner with more than one token, the
// 1-based positions of its tokens.
func (s Scenario) SharedOwners() map[string][]int {
	byOwner := map[string][]int{}
	for i, t := range s.Tokens {
		if t.Valid() {
			byOwner[t.Owner] = append(byOwner[t.Owner], i+1)
		}
	}
	for o, idx := range byOwner {
		if len(idx) < 2 {
			delete(byOwner, o)
		}
	}
	return byOwner
}

// Secrets returns the tokens' texts in order, for the client's options.
func (s Scenario) Secrets() []string {
	out := make([]string, len(s.Tokens))
	for i, t := range s.Tokens {
		out[i] = t.Secret
	}
	return out
}

// PhysicalRate is K·L/W in requests per second: no client can sustain
// more against K independent buckets of L requests per window W.
func (s Scenario) PhysicalRate() float64 {
	return float64(int64(len(s.Owners()))*s.Limit) / s.Window.Seconds()
}

// SimConfig is the simulator's configuration: one GitHub API at /github
// that knows the valid tokens (the revoked one gets 401), with GitHub's
// documented secondary limits.
func (s Scenario) SimConfig() sim.Config {
	api := sim.APIConfig{
		Name: APIName, Dialect: sim.DialectGitHub, Prefix: apiPrefix,
		Limit: s.Limit, Window: s.Window, WindowMode: sim.WindowRolling,
		Latency: s.Latency,
	}
	for _, t := range s.Tokens {
		if t.Valid() {
			api.Tokens = append(api.Tokens, sim.TokenConfig{Token: t.Secret, Owner: t.Owner})
		}
	}
	return sim.Config{Seed: 1, APIs: []sim.APIConfig{api}}
}

// describeLimit is "100 requests per owner per 10s".
func (s Scenario) describeLimit() string {
	return fmt.Sprintf("%d requests per owner per %s", s.Limit, shortDuration(s.Window))
}

// shortDuration writes 10s as 10s, 1m0s as 1m and 1h0m0s as 1h.
func shortDuration(d time.Duration) string {
	switch {
	case d >= time.Hour && d%time.Hour == 0:
		return fmt.Sprintf("%dh", d/time.Hour)
	case d >= time.Minute && d%time.Minute == 0:
		return fmt.Sprintf("%dm", d/time.Minute)
	}
	return d.String()
}
