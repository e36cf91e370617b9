package sim

import (
	"crypto/sha256"
	"encoding/base64"
	"encoding/hex"
	"net/http"
	"strconv"
	"strings"
	"sync"
	"time"
)

// resourceSpec is one rate-limit resource of a dialect with the provider's
// default limits. anonLimit < 0 means anonymous requests are refused with 401
// (GitHub code search and GraphQL need a token).
type resourceSpec struct {
	name      string
	limit     int64
	anonLimit int64
	window    time.Duration
	mode      string
}

// spec is what a dialect does when the config says nothing.
type spec struct {
	resources       []resourceSpec // [0] is the main resource
	exhaustedStatus int
	secondary       *SecondaryConfig
	freeNotModified bool
	rateHeaders     bool
	// countRefused: refused requests still count as used (Rack::Attack).
	countRefused bool
}

func (s *spec) resourceIndex(name string) int {
	for i, r := range s.resources {
		if r.name == name {
			return i
		}
	}
	return -1
}

func (s *spec) otherResourceNames() []string {
	var names []string
	for _, r := range s.resources[1:] {
		names = append(names, r.name)
	}
	if len(names) == 0 {
		return []string{"none: this dialect has a single resource"}
	}
	return names
}

// The providers' documented defaults.
var (
	githubSpec = &spec{
		resources: []resourceSpec{
			{name: "core", limit: 5000, anonLimit: 60, window: time.Hour, mode: WindowRolling},
			{name: "search", limit: 30, anonLimit: 10, window: time.Minute, mode: WindowRolling},
			{name: "code_search", limit: 10, anonLimit: -1, window: time.Minute, mode: WindowRolling},
			{name: "graphql", limit: 5000, anonLimit: -1, window: time.Hour, mode: WindowRolling},
		},
		exhaustedStatus: 403,
		secondary:       &SecondaryConfig{MaxConcurrent: 100, PointsPerMinute: 900, GraphQLPointsPerMinute: 2000, Penalty: time.Minute, RetryAfter: true, Status: 403},
		freeNotModified: true,
		rateHeaders:     true,
	}
	gitlabSpec = &spec{
		resources: []resourceSpec{
			// GitLab.com: 2,000 authenticated API requests a minute per user,
			// 500 unauthenticated per IP, in Rack::Attack's aligned periods.
			{name: "api", limit: 2000, anonLimit: 500, window: time.Minute, mode: WindowFixed},
		},
		exhaustedStatus: 429,
		rateHeaders:     true,
		countRefused:    true,
	}
	huggingfaceSpec = &spec{
		resources: []resourceSpec{
			// Free user / anonymous IP, per 5-minute fixed window.
			{name: "api", limit: 1000, anonLimit: 500, window: 5 * time.Minute, mode: WindowFixed},
			{name: "resolvers", limit: 5000, anonLimit: 3000, window: 5 * time.Minute, mode: WindowFixed},
			{name: "pages", limit: 200, anonLimit: 100, window: 5 * time.Minute, mode: WindowFixed},
		},
		exhaustedStatus: 429,
		rateHeaders:     true,
	}
	giteaSpec = &spec{
		resources: []resourceSpec{
			// Gitea and Forgejo limit nothing by default; a limit, when
			// configured, behaves like a reverse proxy in front (Codeberg).
			{name: "api", limit: 0, anonLimit: 0, window: time.Hour, mode: WindowRolling},
		},
		exhaustedStatus: 429,
		rateHeaders:     false,
	}
	// The language-model APIs' buckets refill continuously; a token is
	// needed (anonLimit -1). OpenAI's usage tier 1 for a small model;
	// Anthropic's tier 1.
	openaiSpec = &spec{
		resources: []resourceSpec{
			{name: "requests", limit: 500, anonLimit: -1, window: time.Minute, mode: WindowContinuous},
			{name: "tokens", limit: 200_000, anonLimit: -1, window: time.Minute, mode: WindowContinuous},
		},
		exhaustedStatus: 429,
		rateHeaders:     true,
	}
	anthropicSpec = &spec{
		resources: []resourceSpec{
			{name: "requests", limit: 50, anonLimit: -1, window: time.Minute, mode: WindowContinuous},
			{name: "input_tokens", limit: 30_000, anonLimit: -1, window: time.Minute, mode: WindowContinuous},
			{name: "output_tokens", limit: 8_000, anonLimit: -1, window: time.Minute, mode: WindowContinuous},
		},
		exhaustedStatus: 429,
		rateHeaders:     true,
	}
)

func dialectSpec(d string) *spec {
	switch d {
	case DialectGitHub:
		return githubSpec
	case DialectGitLab:
		return gitlabSpec
	case DialectHuggingFace:
		return huggingfaceSpec
	case DialectOpenAI:
		return openaiSpec
	case DialectAnthropic:
		return anthropicSpec
	default:
		return giteaSpec
	}
}

// dialect is what differs between the simulated providers: how a token is
// sent, which endpoints exist and what they answer, and how rate-limit state
// and refusals are written.
type dialect interface {
	// credential returns the token of the request; present reports whether
	// the request tried to authenticate at all.
	credential(r *http.Request) (token string, present bool)
	// route classifies the request and says how to answer it.
	route(c *call) endpoint
	// headers sets the headers every answer carries (besides Date).
	headers(c *call, h http.Header)
	// rateHeaders sets the rate-limit headers of bucket state st.
	rateHeaders(c *call, h http.Header, st bucketState)
	// unauthorized answers 401; missing says no token was sent.
	unauthorized(c *call, missing bool) *rendered
	// exhausted answers a request refused by an empty bucket.
	exhausted(c *call, st bucketState) *rendered
	// secondaryRefusal answers a request refused by a secondary limit.
	secondaryRefusal(c *call, status int) *rendered
	// endpointRefused is the 429 answer of a request refused by an
	// endpoint limit, without rate-limit headers.
	endpointRefused(c *call) *rendered
	// throttleHeaders sets the headers describing the endpoint limit
	// named name, with state st, on its refusal (Retry-After aside).
	throttleHeaders(c *call, h http.Header, st bucketState, name string)
	// etag formats the entity tag of body as sent to a request carrying
	// none of the headers a dialect may mix into it.
	etag(body []byte) string
	// tagFor is the entity tag of rd as answered to r: rd.etag, except
	// where the API mixes the request into its tags (GitHub).
	tagFor(r *http.Request, rd *rendered) string
}

// endpoint says how to answer one request.
type endpoint struct {
	res       int  // resource index in the dialect's spec
	needsAuth bool // anonymous requests get 401
	write     bool // counts for write spacing
	points    int64
	// cost is what the request takes from its bucket: 1 (the default),
	// or a GraphQL query's points.
	cost int64
	// graphql: the secondary points go to the GraphQL budget, when the
	// API has one.
	graphql bool
	free    bool // costs no primary quota (GitHub /rate_limit)
	events  bool // an events feed: X-Poll-Interval and scheduled changes
	// The content depends on the version of the request's own path, which
	// touches, writes and (for events) the schedule advance.
	// ownerDependent: the content differs per owner (/user).
	ownerDependent bool
	// static renders cacheable content: the same key always renders the
	// same bytes. Exactly one of static and dynamic is set.
	static func(c *call) *rendered
	// dynamic renders content after the quota was spent (writes, GraphQL,
	// /rate_limit), given the bucket's state after this request.
	dynamic func(c *call, st bucketState) *rendered
	// bumps are the paths whose version a served write advances.
	bumps []string
	// variant distinguishes representations of one path (raw vs JSON).
	variant string
}

// rendered is a complete answer body with its own headers.
type rendered struct {
	status      int
	contentType string
	body        []byte
	etag        string
	header      [][2]string // extra headers, canonical keys
	length      string      // len(body), formatted once
	// tags memoizes request-dependent entity tags (see tagFor): the
	// request part of the hash, as a string, to the tag.
	tags sync.Map
}

func newRendered(status int, contentType string, body []byte) *rendered {
	return &rendered{status: status, contentType: contentType, body: body, length: strconv.Itoa(len(body))}
}

func (rd *rendered) with(key, value string) *rendered {
	rd.header = append(rd.header, [2]string{key, value})
	return rd
}

// Content types.
const (
	ctJSON = "application/json; charset=utf-8"
	ctText = "text/plain; charset=utf-8"
	// ctTextPlain is Rack::Attack's throttled response type, as sent.
	ctTextPlain = "text/plain"
	ctMarkdown  = "text/markdown; charset=utf-8"
)

// sha256Hex is the hex SHA-256 of b.
func sha256Hex(b []byte) string {
	sum := sha256.Sum256(b)
	return hex.EncodeToString(sum[:])
}

// etagMatches reports whether an If-None-Match value matches etag with the
// weak comparison RFC 9110 prescribes for it.
func etagMatches(ifNoneMatch, etag string) bool {
	if ifNoneMatch == "" || etag == "" {
		return false
	}
	want := strings.TrimPrefix(etag, "W/")
	for part := range strings.SplitSeq(ifNoneMatch, ",") {
		part = strings.TrimSpace(part)
		if part == "*" || strings.TrimPrefix(part, "W/") == want {
			return true
		}
	}
	return false
}

// bearer extracts the credential of an Authorization header with one of the
// given schemes (compared case-insensitively). With "Basic", the token is
// the password, or the user name when there is none.
func bearer(r *http.Request, schemes ...string) (string, bool) {
	v := r.Header.Get("Authorization")
	if v == "" {
		return "", false
	}
	scheme, tok, ok := strings.Cut(strings.TrimSpace(v), " ")
	if !ok {
		return "", true
	}
	for _, s := range schemes {
		if !strings.EqualFold(scheme, s) {
			continue
		}
		if !strings.EqualFold(s, "basic") {
			return strings.TrimSpace(tok), true
		}
		raw, err := base64.StdEncoding.DecodeString(strings.TrimSpace(tok))
		if err != nil {
			return "", true
		}
		user, pass, _ := strings.Cut(string(raw), ":")
		if pass == "" {
			return user, true
		}
		return pass, true
	}
	return "", true
}

// queryToken is a token given as the first of the query parameters keys
// present (an empty one included: a credential was sent, and it is wrong).
func queryToken(r *http.Request, keys ...string) (string, bool) {
	q := r.URL.Query()
	for _, k := range keys {
		if q.Has(k) {
			return q.Get(k), true
		}
	}
	return "", false
}

// secondsUntil is the whole seconds from now until Unix second reset,
// rounded up so a client that waits that long arrives after the reset.
func secondsUntil(now time.Time, reset int64) int64 {
	d := time.Unix(reset, 0).Sub(now)
	if d <= 0 {
		return 0
	}
	return int64((d + time.Second - 1) / time.Second)
}

// ceilSeconds rounds d up to whole seconds, at least 1.
func ceilSeconds(d time.Duration) int64 {
	s := int64((d + time.Second - 1) / time.Second)
	return max(s, 1)
}

func itoa(n int64) string { return strconv.FormatInt(n, 10) }
