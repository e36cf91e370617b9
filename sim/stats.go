package sim

import (
	"encoding/json"
	"net/http"
	"time"
)

// Stats is a snapshot of every bucket's counters.
type Stats struct {
	// Start is when the timelines begin (New, or the last Reset), on the
	// real clock (not skewed).
	Start time.Time `json:"start"`
	// Buckets lists, per API in config order: the configured owners' buckets
	// (in token order, each owner's resources in the dialect's order), then
	// the anonymous client IPs' buckets that saw requests.
	Buckets []BucketStats `json:"buckets"`
	// EndpointLimits lists, per API in config order, each owner's count
	// of each endpoint limit that saw a request (configured owners first).
	EndpointLimits []EndpointLimitStats `json:"endpoint_limits,omitempty"`
	// Apps lists every installation of every App, per API in config
	// order, with its mints.
	Apps []AppStats `json:"apps,omitempty"`
	// APIs sums the counters per API, in config order.
	APIs []APIStats `json:"apis"`
	// Total sums the counters of all buckets, with the endpoint limits'
	// refusals and early retries (MaxInFlight is the largest).
	Total Counters `json:"total"`
}

// APIStats are the counters of one API: its buckets' with its endpoint
// limits' refusals and early retries.
type APIStats struct {
	API     string `json:"api"`
	Dialect string `json:"dialect"`
	Counters
}

// EndpointLimitStats describes one owner's count of one endpoint limit.
// Its requests are also counted on the owner's bucket, whose Requests
// and Charged include the ones refused here (the main limit counted them
// first) and whose Accepted does not.
type EndpointLimitStats struct {
	API       string `json:"api"`
	Name      string `json:"name"`
	Pattern   string `json:"pattern"`
	Owner     string `json:"owner"`
	Anonymous bool   `json:"anonymous"`
	Limit     int64  `json:"limit"`
	// WindowSeconds, WindowMode and Refusal are the limit's settings.
	WindowSeconds int64  `json:"window_seconds"`
	WindowMode    string `json:"window_mode"`
	Refusal       string `json:"refusal"`
	// The current window as of the snapshot (server clock).
	Used      int64     `json:"used"`
	Remaining int64     `json:"remaining"`
	Reset     time.Time `json:"reset"`
	// Requests reached the limit (the main limit admitted them);
	// Accepted were let through and Refused answered 429.
	Requests int64 `json:"requests"`
	Accepted int64 `json:"accepted"`
	Refused  int64 `json:"refused"`
	// EarlyRetries are the requests matching the limit that arrived
	// before the time its last refusal named (see Counters.EarlyRetries),
	// whatever answered them.
	EarlyRetries int64 `json:"early_retries"`
}

// BucketStats describes one (API, owner, resource) bucket.
type BucketStats struct {
	API       string `json:"api"`
	Dialect   string `json:"dialect"`
	Owner     string `json:"owner"` // the owner's login, or the client IP for anonymous buckets
	Anonymous bool   `json:"anonymous"`
	Resource  string `json:"resource"`
	// Limit per window; 0 means unlimited.
	Limit         int64  `json:"limit"`
	WindowSeconds int64  `json:"window_seconds"`
	WindowMode    string `json:"window_mode"`
	// The current window as of the snapshot (server clock).
	Used      int64     `json:"used"`
	Remaining int64     `json:"remaining"`
	Reset     time.Time `json:"reset"`
	Counters
	// Timeline holds the accepted requests of each second since Stats.Start:
	// Timeline[i] counts those in [Start+i s, Start+i+1 s). Served over
	// HTTP only with GET /_stats?timeline=1.
	Timeline []uint32 `json:"timeline,omitempty"`
}

// Counters are what happened to the requests of a bucket.
type Counters struct {
	// Requests counts every request attributed to the bucket.
	Requests int64 `json:"requests"`
	// Accepted were served (including 304s and free requests).
	Accepted int64 `json:"accepted"`
	// Charged is the quota those requests spent.
	Charged int64 `json:"charged"`
	// NotModified were answered 304.
	NotModified int64 `json:"not_modified"`
	// Unauthorized were answered 401 (unknown token, or no token where one
	// is needed); they are counted on the client IP's anonymous bucket.
	Unauthorized int64 `json:"unauthorized"`
	// Violations are requests that arrived when the bucket was empty or the
	// owner was under (or tripped) a secondary-limit penalty, and (in the
	// API's and the total counters) those an endpoint limit refused: the
	// sum of PrimaryViolations, SecondaryViolations and
	// EndpointViolations. A well-behaved client keeps the first two at 0;
	// an endpoint limit announces nothing, so finding it costs a refusal.
	Violations          int64 `json:"violations"`
	PrimaryViolations   int64 `json:"primary_violations"`
	SecondaryViolations int64 `json:"secondary_violations"`
	// EndpointViolations are the requests endpoint limits refused; only
	// the API's and the total counters have them (see EndpointLimitStats).
	EndpointViolations int64 `json:"endpoint_violations"`
	// EarlyRetries are requests that arrived at a refused scope (a bucket,
	// an owner's secondary-limit penalty, an owner's endpoint limit)
	// after its refusal and before the time the refusal named: the end of
	// the window it refused (which Retry-After rounds up to whole
	// seconds); the end of a secondary penalty when Retry-After was sent;
	// otherwise the least wait: GitHubSecondaryWait after a GitHub
	// secondary refusal, MinRetryWait after any other (a bare or plain
	// 429). The server judges by arrival, so a request sent before the
	// client saw the refusal but arriving after it counts. A request
	// early for two scopes counts twice. A client that obeys every
	// refusal keeps this at 0.
	EarlyRetries int64 `json:"early_retries"`
	// ServerErrors, Dropped and BareRefusals (a proxy's headerless
	// refusal: FaultConfig.BareRefusalAt) are injected faults.
	ServerErrors int64 `json:"server_errors"`
	Dropped      int64 `json:"dropped"`
	BareRefusals int64 `json:"bare_refusals"`
	// Hidden were answered 404 because the token cannot see the
	// repository's owner (an installation's or a fine-grained token's
	// other accounts, another installation's private repositories):
	// charged, as GitHub charges them. A client routing each request to
	// a credential that sees it keeps this near 0.
	Hidden int64 `json:"hidden"`
	// ExpiredTokens were refused 401 for an installation token past its
	// expires_at (also counted in Unauthorized).
	ExpiredTokens int64 `json:"expired_tokens"`
	// MaxInFlight is the most requests of the owner in flight at once, as
	// seen by requests to this bucket.
	MaxInFlight int64 `json:"max_in_flight"`
}

func (t *Counters) add(c Counters) {
	t.Requests += c.Requests
	t.Accepted += c.Accepted
	t.Charged += c.Charged
	t.NotModified += c.NotModified
	t.Unauthorized += c.Unauthorized
	t.Violations += c.Violations
	t.PrimaryViolations += c.PrimaryViolations
	t.SecondaryViolations += c.SecondaryViolations
	t.EndpointViolations += c.EndpointViolations
	t.EarlyRetries += c.EarlyRetries
	t.ServerErrors += c.ServerErrors
	t.Dropped += c.Dropped
	t.BareRefusals += c.BareRefusals
	t.Hidden += c.Hidden
	t.ExpiredTokens += c.ExpiredTokens
	t.MaxInFlight = max(t.MaxInFlight, c.MaxInFlight)
}

// Stats returns a snapshot of every bucket, with timelines.
func (s *Server) Stats() Stats {
	st := Stats{Start: *s.start.Load()}
	realNow := time.Now()
	for _, a := range s.apis {
		now := realNow.Add(a.skew)
		a.anonMu.Lock()
		owners := append(append([]*owner(nil), a.owners...), a.anonOrder...)
		a.anonMu.Unlock()
		as := APIStats{API: a.name, Dialect: a.kind}
		for _, o := range owners {
			for _, b := range o.buckets {
				bs, seen := b.snapshot(now)
				if o.anonymous && !seen {
					continue
				}
				st.Buckets = append(st.Buckets, bs)
				as.add(bs.Counters)
			}
		}
		for _, o := range owners {
			for _, el := range a.endpointLimits {
				o.epMu.Lock()
				ec := o.endpoints[el.index]
				o.epMu.Unlock()
				if ec == nil {
					continue
				}
				es := ec.snapshot(now)
				es.API = a.name
				st.EndpointLimits = append(st.EndpointLimits, es)
				as.add(Counters{Violations: es.Refused, EndpointViolations: es.Refused, EarlyRetries: es.EarlyRetries})
			}
		}
		st.Apps = append(st.Apps, a.appStats()...)
		st.APIs = append(st.APIs, as)
		st.Total.add(as.Counters)
	}
	return st
}

// EndpointLimitFor returns one owner's stats of the endpoint limit named
// name in the API named api, and whether it saw a request.
func (st Stats) EndpointLimitFor(api, owner, name string) (EndpointLimitStats, bool) {
	for _, e := range st.EndpointLimits {
		if e.API == api && e.Owner == owner && e.Name == name {
			return e, true
		}
	}
	return EndpointLimitStats{}, false
}

// BucketFor returns the stats of one owner's bucket in the API named api
// (resource "" means the main one), and whether there is such a bucket.
func (st Stats) BucketFor(api, owner, resource string) (BucketStats, bool) {
	for _, b := range st.Buckets {
		if b.API == api && b.Owner == owner && (b.Resource == resource || resource == "" && b.mainResource()) {
			return b, true
		}
	}
	return BucketStats{}, false
}

func (b BucketStats) mainResource() bool {
	c, ok := canonicalDialect(b.Dialect)
	return ok && dialectSpec(c).resources[0].name == b.Resource
}

// snapshot copies the bucket's stats; seen reports whether any request
// reached it.
func (b *bucket) snapshot(now time.Time) (BucketStats, bool) {
	b.mu.Lock()
	defer b.mu.Unlock()
	state := b.state(now.Unix())
	mode := WindowRolling
	if b.fixed {
		mode = WindowFixed
	}
	if b.continuous {
		state, mode = b.levelState(now), WindowContinuous
	}
	bs := BucketStats{
		API: b.api.name, Dialect: b.api.kind, Owner: b.owner.name, Anonymous: b.owner.anonymous,
		Resource: b.api.res[b.resource].name, Limit: b.limit, WindowSeconds: b.window, WindowMode: mode,
		Used: state.used, Remaining: state.remaining, Reset: time.Unix(state.reset, 0).UTC(),
		Counters: Counters{
			Requests: b.requests, Accepted: b.accepted, Charged: b.charged, NotModified: b.notModified,
			Unauthorized: b.unauthorized, Violations: b.primaryViolations + b.secondaryViolations,
			PrimaryViolations: b.primaryViolations, SecondaryViolations: b.secondaryViolations,
			EarlyRetries: b.earlyRetries,
			ServerErrors: b.serverErrors, Dropped: b.dropped, BareRefusals: b.bareRefusals, MaxInFlight: b.maxInFlight,
			Hidden: b.hidden, ExpiredTokens: b.expired,
		},
		Timeline: append([]uint32(nil), b.timeline...),
	}
	if b.limit == 0 {
		bs.Remaining = 0
	}
	return bs, b.requests > 0
}

func (s *Server) serveStats(w http.ResponseWriter, r *http.Request) {
	if r.Method != http.MethodGet && r.Method != http.MethodHead {
		controlError(w, http.StatusMethodNotAllowed, "use GET /_stats")
		return
	}
	st := s.Stats()
	if r.URL.Query().Get("timeline") == "" {
		for i := range st.Buckets {
			st.Buckets[i].Timeline = nil
		}
	}
	w.Header().Set("Content-Type", ctJSON)
	w.Header().Set("Cache-Control", "no-store")
	enc := json.NewEncoder(w)
	enc.SetIndent("", "  ")
	_ = enc.Encode(st)
}
