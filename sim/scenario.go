package sim

import (
	"fmt"
	"math/rand/v2"
	"time"
)

// UsersThrottle describes a ready-made simulator for a batch that mixes a
// limit nobody announces with ordinary work: one token (owner "bench")
// whose main throttle is generous and announced, while
// GET /users/:id has a small limit of its own, silent until it refuses.
// The zero value is GitLab.com's shape at its real scale: a 2,000 a
// minute main throttle with headers, and /api/v4/users/* at 40 per
// aligned 60-second window, refused with 429, Retry-After and that
// throttle's RateLimit-* headers.
type UsersThrottle struct {
	// Limit and Window of the users limit. Default 40 per 60 s. A
	// benchmark may scale the window down (e.g. 40 per 10 s).
	Limit  int64
	Window time.Duration
	// Refusal is how the users limit refuses: RefusalHeaders (default),
	// RefusalRetryAfter, RefusalBare (429 with no header at all) or
	// RefusalPlain.
	Refusal string
	// Generic serves a host nobody configured instead of GitLab: the
	// gitea dialect with no main limit and no rate-limit headers at all,
	// and the same limit on GET /api/v1/users/*.
	Generic bool
	// Latency delays every answer.
	Latency time.Duration
	// Token is the one token's text. Default "tok-bench-1".
	Token string
}

// UsersThrottleName is the users limit's name: its RateLimit-Name, and
// its name in Stats.EndpointLimits.
const UsersThrottleName = "throttle_authenticated_users_api"

// UsersThrottleOwner is the owner of the scenario's token.
const UsersThrottleOwner = "bench"

// Config is the simulator the scenario describes, with one API mounted
// at "/" named "gitlab" (or "gitea" when Generic).
func (u UsersThrottle) Config() Config {
	ac := APIConfig{
		Dialect: DialectGitLab, Limit: 2000, Window: time.Minute, WindowMode: WindowFixed,
		Tokens:  []TokenConfig{{Token: cmpOr(u.Token, "tok-bench-1"), Owner: UsersThrottleOwner}},
		Latency: u.Latency,
	}
	pattern := "GET /api/v4/users/*"
	if u.Generic {
		ac.Dialect, ac.Limit, ac.Window, ac.WindowMode = DialectGitea, 0, 0, ""
		ac.RateLimitHeaders = new(bool)
		pattern = "GET /api/v1/users/*"
	}
	ac.EndpointLimits = []EndpointLimitConfig{{
		Pattern: pattern, Name: UsersThrottleName,
		Limit: cmpOr(u.Limit, 40), Window: cmpOr(u.Window, time.Minute), WindowMode: WindowFixed,
		Refusal: cmpOr(u.Refusal, RefusalHeaders),
	}}
	return Config{APIs: []APIConfig{ac}}
}

// Workload is the scenario's batch below base (the API's URL): users
// user URLs (GET /users/:id) and projects project URLs (GitLab's
// /api/v4/projects/:id, Gitea's /api/v1/repos/o/r<N>), shuffled by seed.
// It reports which entries are user URLs.
func (u UsersThrottle) Workload(base string, users, projects int, seed uint64) (urls []string, isUser []bool) {
	type item struct {
		url  string
		user bool
	}
	var items []item
	for i := range users {
		p := fmt.Sprintf("/api/v4/users/%d", 1000+i)
		if u.Generic {
			p = fmt.Sprintf("/api/v1/users/user%d", 1000+i)
		}
		items = append(items, item{base + p, true})
	}
	for i := range projects {
		p := fmt.Sprintf("/api/v4/projects/%d", 5000+i)
		if u.Generic {
			p = fmt.Sprintf("/api/v1/repos/o/r%d", 5000+i)
		}
		items = append(items, item{base + p, false})
	}
	r := rand.New(rand.NewPCG(seed, seed^0x9e3779b97f4a7c15))
	r.Shuffle(len(items), func(i, j int) { items[i], items[j] = items[j], items[i] })
	for _, it := range items {
		urls = append(urls, it.url)
		isUser = append(isUser, it.user)
	}
	return urls, isUser
}
