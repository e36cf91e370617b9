package headers

import (
	"net/http"
	"reflect"
	"strings"
	"testing"
	"time"
)

// now is the clock of every case: 2026-01-01T00:47:26Z.
var now = time.Date(2026, 1, 1, 0, 47, 26, 0, time.UTC)

const nowDate = "Thu, 01 Jan 2026 00:47:26 GMT"

// want lists the fields a case checks; nil pointers are not checked, and
// the sentinel values below mean "must be unknown".
type want struct {
	limit, remaining, used *int64
	reset                  *time.Time
	noReset                bool
	retryAfter             *time.Duration
	resource               *string
	limited                Limited
	wait                   time.Duration
	dialect                Dialect
	used_                  []string // headers used, when checked
	window                 time.Duration
	poll                   time.Duration
}

func i64(v int64) *int64                 { return &v }
func at(t time.Time) *time.Time          { return &t }
func dur(d time.Duration) *time.Duration { return &d }
func str(s string) *string               { return &s }
func epoch(sec int64) *time.Time         { t := time.Unix(sec, 0).UTC(); return &t }
func after(d time.Duration) *time.Time   { t := now.Add(d); return &t }
func unknown() *int64                    { return i64(UnknownCount) }
func headerOf(lines string) http.Header  { return rawHeader(lines) }
func rawHeader(lines string) (h http.Header) {
	h = http.Header{}
	for _, line := range strings.Split(strings.TrimSpace(lines), "\n") {
		line = strings.TrimSpace(line)
		if line == "" {
			continue
		}
		k, v, _ := strings.Cut(line, ":")
		h.Add(strings.TrimSpace(k), strings.TrimSpace(v))
	}
	return h
}

type parseCase struct {
	name   string
	status int
	header string
	body   string
	want   want
}

func runCases(t *testing.T, cases []parseCase) {
	t.Helper()
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			r := Parse(c.status, headerOf(c.header), []byte(c.body), now)
			check(t, r, c.want)
		})
	}
}

func check(t *testing.T, r Reading, w want) {
	t.Helper()
	if w.limit != nil && r.Limit != *w.limit {
		t.Errorf("Limit = %d, want %d", r.Limit, *w.limit)
	}
	if w.remaining != nil && r.Remaining != *w.remaining {
		t.Errorf("Remaining = %d, want %d", r.Remaining, *w.remaining)
	}
	if w.used != nil && r.Used != *w.used {
		t.Errorf("Used = %d, want %d", r.Used, *w.used)
	}
	if w.reset != nil && !r.Reset.Equal(*w.reset) {
		t.Errorf("Reset = %v, want %v", r.Reset, *w.reset)
	}
	if w.noReset && r.HasReset() {
		t.Errorf("Reset = %v, want none", r.Reset)
	}
	if w.retryAfter != nil {
		if !r.HasRetryAfter || r.RetryAfter != *w.retryAfter {
			t.Errorf("RetryAfter = %v (has %v), want %v", r.RetryAfter, r.HasRetryAfter, *w.retryAfter)
		}
	}
	if w.resource != nil && r.Resource != *w.resource {
		t.Errorf("Resource = %q, want %q", r.Resource, *w.resource)
	}
	if r.Limited != w.limited {
		t.Errorf("Limited = %v, want %v", r.Limited, w.limited)
	}
	if r.Wait != w.wait {
		t.Errorf("Wait = %v, want %v", r.Wait, w.wait)
	}
	if w.dialect != "" && r.Dialect != w.dialect {
		t.Errorf("Dialect = %q, want %q", r.Dialect, w.dialect)
	}
	if w.used_ != nil && !reflect.DeepEqual(r.HeadersUsed, w.used_) {
		t.Errorf("HeadersUsed = %q, want %q", r.HeadersUsed, w.used_)
	}
	if w.window != 0 && r.Window != w.window {
		t.Errorf("Window = %v, want %v", r.Window, w.window)
	}
	if w.poll != 0 && r.PollInterval != w.poll {
		t.Errorf("PollInterval = %v, want %v", r.PollInterval, w.poll)
	}
	if r.Wait < 0 {
		t.Errorf("Wait negative: %v", r.Wait)
	}
}

// resetAt is 2026-01-01T01:00:00Z, 12m34s after now.
const resetAt = 1767229200

const githubDocsSecondary = `{
  "message": "You have exceeded a secondary rate limit. Please wait a few minutes before you try again. If you reach out to GitHub Support for help, please include the request ID DBD8:FB98:31801A8:3222432:65195FDB.",
  "documentation_url": "https://docs.github.com/free-pro-team@latest/rest/overview/rate-limits-for-the-rest-api#about-secondary-rate-limits"
}`

func TestGitHub(t *testing.T) {
	runCases(t, []parseCase{
		{name: "ok", status: 200, header: `
			x-ratelimit-limit: 5000
			x-ratelimit-remaining: 4999
			x-ratelimit-reset: 1767229200
			x-ratelimit-used: 1
			x-ratelimit-resource: core
			x-github-request-id: CAFE:1`,
			want: want{limit: i64(5000), remaining: i64(4999), used: i64(1), reset: epoch(resetAt),
				resource: str("core"), dialect: DialectGitHub,
				used_: []string{"x-ratelimit-limit", "x-ratelimit-remaining", "x-ratelimit-reset", "x-ratelimit-resource", "x-ratelimit-used"}}},
		{name: "primary 403", status: 403, header: `
			x-ratelimit-limit: 5000
			x-ratelimit-remaining: 0
			x-ratelimit-reset: 1767229200
			x-ratelimit-used: 5000
			x-ratelimit-resource: core`,
			body: `{"message":"API rate limit exceeded for user ID 1.","documentation_url":"https://docs.github.com/rest/overview/rate-limits-for-the-rest-api"}`,
			want: want{remaining: i64(0), limited: Primary, wait: 12*time.Minute + 34*time.Second, dialect: DialectGitHub}},
		{name: "primary 429", status: 429, header: `
			x-ratelimit-limit: 60
			x-ratelimit-remaining: 0
			x-ratelimit-reset: 1767229200
			x-ratelimit-resource: core`,
			want: want{limited: Primary, wait: 754 * time.Second}},
		{name: "primary 403 message only", status: 403, header: ``,
			body: `{"message":"API rate limit exceeded for 203.0.113.7. (But here's the good news: Authenticated requests get a higher rate limit.)","documentation_url":"https://docs.github.com/rest/overview/resources-in-the-rest-api#rate-limiting"}`,
			want: want{limited: Primary, wait: DefaultWait, dialect: DialectGitHub}},
		{name: "secondary with retry-after", status: 403, header: `
			retry-after: 60
			x-ratelimit-limit: 5000
			x-ratelimit-remaining: 4000
			x-ratelimit-reset: 1767229200
			x-ratelimit-resource: core`,
			body: githubDocsSecondary,
			want: want{remaining: i64(4000), retryAfter: dur(time.Minute), limited: Secondary, wait: time.Minute}},
		{name: "secondary retry-after 429", status: 429, header: `
			retry-after: 30
			x-ratelimit-remaining: 4000`,
			body: githubDocsSecondary,
			want: want{limited: Secondary, wait: 30 * time.Second}},
		{name: "secondary without retry-after", status: 403, header: `
			x-ratelimit-limit: 5000
			x-ratelimit-remaining: 4000
			x-ratelimit-reset: 1767229200`,
			body: githubDocsSecondary,
			want: want{limited: Secondary, wait: DefaultWait}},
		{name: "secondary without retry-after, none left", status: 403, header: `
			x-ratelimit-limit: 5000
			x-ratelimit-remaining: 0
			x-ratelimit-reset: 1767229200`,
			body: githubDocsSecondary,
			want: want{limited: Secondary, wait: 754 * time.Second}},
		// The reset is the primary bucket's: 4 s away, it does not
		// shorten the secondary penalty's minute.
		{name: "secondary without retry-after, none left, reset soon", status: 403, header: `
			x-ratelimit-limit: 5000
			x-ratelimit-remaining: 0
			x-ratelimit-reset: 1767228450`,
			body: githubDocsSecondary,
			want: want{limited: Secondary, wait: DefaultWait}},
		{name: "secondary by docs url only", status: 403, header: `x-ratelimit-remaining: 12`,
			body: `{"message":"Forbidden","documentation_url":"https://docs.github.com/rest/overview/rate-limits-for-the-rest-api#about-secondary-rate-limits"}`,
			want: want{limited: Secondary, wait: DefaultWait}},
		{name: "abuse detection (old message)", status: 403, header: `retry-after: 45`,
			body: `{"message":"You have triggered an abuse detection mechanism and have been temporarily blocked from content creation. Please retry your request again later.","documentation_url":"https://developer.github.com/v3/#abuse-rate-limits"}`,
			want: want{limited: Secondary, wait: 45 * time.Second, dialect: DialectGitHub}},
		{name: "content creation secondary", status: 403, header: `
			x-ratelimit-limit: 5000
			x-ratelimit-remaining: 4987`,
			body: `{"message":"You have exceeded a secondary rate limit and have been temporarily blocked from content creation. Please retry your request again later.","documentation_url":"https://docs.github.com/rest/overview/resources-in-the-rest-api#secondary-rate-limits"}`,
			want: want{limited: Secondary, wait: DefaultWait}},
		{name: "permission 403 is not a rate limit", status: 403, header: `
			x-ratelimit-limit: 5000
			x-ratelimit-remaining: 4990
			x-ratelimit-reset: 1767229200
			x-ratelimit-resource: core`,
			body: `{"message":"Resource not accessible by integration","documentation_url":"https://docs.github.com/rest/issues/issues#create-an-issue","status":"403"}`,
			want: want{remaining: i64(4990), limited: NotLimited, wait: 0}},
		{name: "permission 403 without headers", status: 403, header: `content-type: application/json`,
			body: `{"message":"Must have admin rights to Repository.","documentation_url":"https://docs.github.com/rest/repos/repos#update-a-repository"}`,
			want: want{limited: NotLimited, wait: 0, dialect: DialectNone}},
		{name: "search resource", status: 200, header: `
			x-ratelimit-limit: 30
			x-ratelimit-remaining: 29
			x-ratelimit-reset: 1767226106
			x-ratelimit-used: 1
			x-ratelimit-resource: search`,
			want: want{limit: i64(30), remaining: i64(29), resource: str("search")}},
		{name: "poll interval", status: 200, header: `
			x-poll-interval: 60
			x-ratelimit-remaining: 4000
			etag: "abc"`,
			want: want{poll: time.Minute, remaining: i64(4000)}},
		{name: "graphql rate limited", status: 200, header: `
			x-ratelimit-limit: 5000
			x-ratelimit-remaining: 0
			x-ratelimit-reset: 1767229200
			x-ratelimit-resource: graphql`,
			body: `{"errors":[{"type":"RATE_LIMITED","message":"API rate limit already exceeded for user ID 1."}]}`,
			want: want{resource: str("graphql"), limited: Primary, wait: 754 * time.Second}},
		{name: "graphql query costing more than the points left", status: 200, header: `
			x-ratelimit-limit: 5000
			x-ratelimit-remaining: 5
			x-ratelimit-reset: 1767229200
			x-ratelimit-resource: graphql`,
			body: `{"errors":[{"type":"RATE_LIMITED","code":"graphql_rate_limit","message":"API rate limit already exceeded for user ID 1."}]}`,
			want: want{resource: str("graphql"), limited: Primary, wait: 754 * time.Second}},
		{name: "graphql data mentioning rate limit is content", status: 200, header: `x-ratelimit-remaining: 4000`,
			body: `{"data":{"repository":{"description":"a RATE_LIMITED demo"}}}`,
			want: want{limited: NotLimited}},
	})
}

func TestGitLab(t *testing.T) {
	runCases(t, []parseCase{
		{name: "ok", status: 200, header: `
			RateLimit-Limit: 600
			RateLimit-Observed: 6
			RateLimit-Remaining: 594
			RateLimit-Reset: 1767229200
			RateLimit-ResetTime: Thu, 01 Jan 2026 01:00:00 GMT
			RateLimit-Name: throttle_authenticated_api`,
			want: want{limit: i64(600), used: i64(6), remaining: i64(594), reset: epoch(resetAt),
				resource: str("throttle_authenticated_api"), dialect: DialectGitLab,
				used_: []string{"ratelimit-limit", "ratelimit-name", "ratelimit-observed", "ratelimit-remaining", "ratelimit-reset", "ratelimit-resettime"}}},
		{name: "429 exhausted", status: 429, header: `
			RateLimit-Limit: 600
			RateLimit-Observed: 600
			RateLimit-Remaining: 0
			RateLimit-Reset: 1767229200
			RateLimit-ResetTime: Thu, 01 Jan 2026 01:00:00 GMT
			Retry-After: 754`,
			body: "Retry later\n",
			want: want{limited: Primary, retryAfter: dur(754 * time.Second), wait: 754 * time.Second, dialect: DialectGitLab}},
		{name: "429 from another throttle", status: 429, header: `
			RateLimit-Limit: 2000
			RateLimit-Observed: 12
			RateLimit-Remaining: 1988
			RateLimit-Reset: 1767229200
			Retry-After: 30`,
			body: "Retry later\n",
			want: want{remaining: i64(1988), limited: Secondary, wait: 30 * time.Second}},
		{name: "429 with nothing but a body", status: 429, header: `Content-Type: text/plain`, body: "Retry later\n",
			want: want{limited: Bare, wait: DefaultWait, dialect: DialectNone}},
		{name: "reset time only", status: 200, header: `
			RateLimit-Remaining: 0
			RateLimit-ResetTime: Thu, 01 Jan 2026 00:48:26 GMT`,
			want: want{remaining: i64(0), wait: time.Minute}},
	})
}

func TestIETFStructured(t *testing.T) {
	runCases(t, []parseCase{
		{name: "policy and limit", status: 200, header: `
			RateLimit-Policy: "default";q=100;w=60
			RateLimit: "default";r=50;t=30`,
			want: want{limit: i64(100), remaining: i64(50), reset: after(30 * time.Second), window: time.Minute,
				resource: str("default"), dialect: DialectIETF, used_: []string{"ratelimit", "ratelimit-policy"}}},
		{name: "several items, most restrictive", status: 200, header: `
			RateLimit-Policy: "permin";q=50;w=60,"perhr";q=1000;w=3600
			RateLimit: "permin";r=10;t=20, "perhr";r=5;t=1800`,
			want: want{limit: i64(1000), remaining: i64(5), reset: after(1800 * time.Second), resource: str("perhr")}},
		{name: "items split over field lines", status: 200, header: `
			RateLimit-Policy: "hour";q=1000;w=3600
			RateLimit-Policy: "day";q=5000;w=86400
			RateLimit: "hour";r=800;t=1200
			RateLimit: "day";r=100;t=36000`,
			want: want{limit: i64(5000), remaining: i64(100), reset: after(10 * time.Hour), resource: str("day"), window: 24 * time.Hour}},
		{name: "only the policy the limit names", status: 200, header: `
			RateLimit-Policy: "hour";q=1000;w=3600, "day";q=5000;w=86400
			RateLimit: "day";r=100;t=36000`,
			want: want{limit: i64(5000), remaining: i64(100), resource: str("day")}},
		{name: "malformed items ignored", status: 200, header: `
			RateLimit: "a";t=10, "b";r=3;t=5, "c";r=-1;t=1, "d";r="x"`,
			want: want{remaining: i64(3), reset: after(5 * time.Second), resource: str("b")}},
		{name: "exhausted on a 200", status: 200, header: `RateLimit: "default";r=0;t=50`,
			want: want{remaining: i64(0), limited: NotLimited, wait: 50 * time.Second}},
		{name: "429 retry-after date with r=0", status: 429, header: `
			Date: ` + nowDate + `
			Retry-After: Thu, 01 Jan 2026 00:47:31 GMT
			RateLimit: "default";r=0;t=5`,
			want: want{limited: Primary, retryAfter: dur(5 * time.Second), wait: 5 * time.Second}},
		{name: "retry-after takes precedence", status: 429, header: `
			Retry-After: 20
			RateLimit-Policy: "dynamic";q=100;w=60
			RateLimit: "dynamic";r=15;t=40`,
			want: want{remaining: i64(15), limited: Secondary, wait: 20 * time.Second}},
		{name: "429 pushback r=0", status: 429, header: `
			RateLimit-Policy: "dynamic";q=15;w=20
			RateLimit: "dynamic";r=0;t=20`,
			want: want{limit: i64(15), limited: Primary, wait: 20 * time.Second}},
		{name: "partition key and comments", status: 200, header: `
			RateLimit-Policy: "peruser";q=100;w=60;pk=:cHsdsRa894==:;acme-burst=5
			RateLimit: "peruser";r=99;t=59;pk=:cHsdsRa894==:`,
			want: want{limit: i64(100), remaining: i64(99)}},
		{name: "content-bytes quota does not count as requests", status: 200, header: `
			RateLimit-Policy: "bytes";q=65535;qu="content-bytes";w=10, "reqs";q=100;w=60
			RateLimit: "bytes";r=10;t=5, "reqs";r=90;t=50`,
			want: want{limit: i64(100), remaining: i64(90), resource: str("reqs")}},
		{name: "content-bytes quota used up counts", status: 200, header: `
			RateLimit-Policy: "bytes";q=65535;qu="content-bytes";w=10, "reqs";q=100;w=60
			RateLimit: "bytes";r=0;t=5, "reqs";r=90;t=50`,
			want: want{remaining: i64(0), resource: str("bytes"), wait: 5 * time.Second}},
		{name: "policy only", status: 200, header: `RateLimit-Policy: "burst";q=100;w=60,"daily";q=1000;w=86400`,
			want: want{limit: i64(100), remaining: unknown(), resource: str("burst"), window: time.Minute}},
		{name: "token names (near miss)", status: 200, header: `RateLimit: default;r=50;t=30`,
			want: want{remaining: i64(50), reset: after(30 * time.Second), resource: str("default")}},
		{name: "spaces and case (near miss)", status: 200, header: `RateLimit: "default"; R = 50 ; T = 30`,
			want: want{remaining: i64(50), reset: after(30 * time.Second)}},
		{name: "unquoted name with dots (near miss)", status: 200, header: `RateLimit: api.v2;r=7;t=3`,
			want: want{remaining: i64(7), resource: str("api.v2")}},
		{name: "decimal remaining", status: 200, header: `RateLimit: "d";r=7.9;t=3`,
			want: want{remaining: i64(7)}},
		{name: "draft-07 dictionary", status: 200, header: `
			RateLimit: limit=100, remaining=50, reset=30
			RateLimit-Policy: 100;w=60`,
			want: want{limit: i64(100), remaining: i64(50), reset: after(30 * time.Second), window: time.Minute}},
		{name: "garbage field ignored", status: 200, header: `RateLimit: ((( not a list`,
			want: want{remaining: unknown(), limit: unknown(), dialect: DialectNone, used_: nil}},
		{name: "earlier drafts' separate fields", status: 200, header: `
			RateLimit-Limit: 100
			RateLimit-Remaining: 0
			RateLimit-Reset: 50`,
			want: want{limit: i64(100), remaining: i64(0), reset: after(50 * time.Second), wait: 50 * time.Second, dialect: DialectIETFOld}},
		{name: "earlier drafts' limit with policies", status: 200, header: `
			RateLimit-Limit: 10, 10;w=1, 50;w=60
			RateLimit-Remaining: 9
			RateLimit-Reset: 1`,
			want: want{limit: i64(10), remaining: i64(9)}},
	})
}

func TestOtherDialects(t *testing.T) {
	runCases(t, []parseCase{
		{name: "twitter x-rate-limit", status: 429, header: `
			x-rate-limit-limit: 900
			x-rate-limit-remaining: 0
			x-rate-limit-reset: 1767229200`,
			want: want{limit: i64(900), remaining: i64(0), limited: Primary, wait: 754 * time.Second, dialect: DialectXRate}},
		{name: "discord 429", status: 429, header: `
			X-RateLimit-Limit: 5
			X-RateLimit-Remaining: 0
			X-RateLimit-Reset: 1767228510.57
			X-RateLimit-Reset-After: 64.57
			X-RateLimit-Bucket: abcd1234
			X-RateLimit-Scope: user`,
			body: `{"message": "You are being rate limited.", "retry_after": 64.57, "global": false}`,
			want: want{limit: i64(5), remaining: i64(0), resource: str("abcd1234"), limited: Primary,
				retryAfter: dur(64570 * time.Millisecond), wait: 64570 * time.Millisecond, dialect: DialectDiscord}},
		{name: "discord reset-after only", status: 200, header: `
			X-RateLimit-Limit: 5
			X-RateLimit-Remaining: 0
			X-RateLimit-Reset-After: 1.5`,
			want: want{reset: after(1500 * time.Millisecond), wait: 1500 * time.Millisecond}},
		{name: "openai requests and tokens", status: 200, header: `
			x-ratelimit-limit-requests: 60
			x-ratelimit-limit-tokens: 150000
			x-ratelimit-remaining-requests: 59
			x-ratelimit-remaining-tokens: 149984
			x-ratelimit-reset-requests: 1s
			x-ratelimit-reset-tokens: 6m0s`,
			want: want{limit: i64(60), remaining: i64(59), reset: after(time.Second), resource: str("requests"), dialect: DialectQualified}},
		{name: "openai tokens exhausted", status: 429, header: `
			x-ratelimit-limit-requests: 10000
			x-ratelimit-remaining-requests: 9999
			x-ratelimit-limit-tokens: 2000000
			x-ratelimit-remaining-tokens: 0
			x-ratelimit-reset-requests: 6ms
			x-ratelimit-reset-tokens: 1m20.5s`,
			want: want{remaining: i64(0), resource: str("tokens"), limited: Primary, wait: 80500 * time.Millisecond}},
		{name: "retry-after-ms", status: 429, header: `
			retry-after-ms: 20
			x-ratelimit-remaining-requests: 0
			x-ratelimit-reset-requests: 20ms`,
			want: want{retryAfter: dur(20 * time.Millisecond), wait: 20 * time.Millisecond, limited: Primary}},
		{name: "anthropic rfc3339 resets", status: 200, header: `
			anthropic-ratelimit-requests-limit: 50
			anthropic-ratelimit-requests-remaining: 49
			anthropic-ratelimit-requests-reset: 2026-01-01T00:48:26Z
			anthropic-ratelimit-tokens-limit: 40000
			anthropic-ratelimit-tokens-remaining: 39000
			anthropic-ratelimit-tokens-reset: 2026-01-01T00:47:30Z`,
			want: want{limit: i64(50), remaining: i64(49), reset: after(time.Minute), resource: str("requests")}},
		{name: "reddit float remaining, delta reset", status: 200, header: `
			x-ratelimit-used: 2
			x-ratelimit-remaining: 598.0
			x-ratelimit-reset: 412`,
			want: want{used: i64(2), remaining: i64(598), reset: after(412 * time.Second)}},
		{name: "kong per-period", status: 200, header: `
			X-RateLimit-Limit-Minute: 10
			X-RateLimit-Remaining-Minute: 9
			X-RateLimit-Limit-Hour: 100
			X-RateLimit-Remaining-Hour: 50`,
			want: want{limit: i64(10), remaining: i64(9), resource: str("minute"), window: time.Minute}},
		{name: "epoch milliseconds", status: 200, header: `
			X-RateLimit-Remaining: 0
			X-RateLimit-Reset: 1767229200000`,
			want: want{reset: epoch(resetAt), wait: 754 * time.Second}},
		{name: "family retry-after", status: 429, header: `X-RateLimit-Retry-After: 7`,
			want: want{retryAfter: dur(7 * time.Second), wait: 7 * time.Second, limited: Bare}},
		{name: "hugging face", status: 200, header: `
			ratelimit: "api";r=489;t=189
			ratelimit-policy: "fixed window";"api";q=500;w=300`,
			want: want{limit: i64(500), remaining: i64(489), reset: after(189 * time.Second), window: 5 * time.Minute,
				resource: str("api"), dialect: DialectIETF}},
		{name: "hugging face 429", status: 429, header: `
			RateLimit: "api";r=0;t=55
			RateLimit-Policy: "fixed window";"api";q=2500;w=300`,
			want: want{limit: i64(2500), remaining: i64(0), limited: Primary, wait: 55 * time.Second}},
		{name: "one policy under another name", status: 200, header: `
			RateLimit: "default";r=50;t=30
			RateLimit-Policy: "burst";q=100;w=60`,
			want: want{limit: i64(100), remaining: i64(50)}},
		{name: "shopify call limit", status: 200, header: `X-Shopify-Shop-Api-Call-Limit: 32/40`,
			want: want{limit: i64(40), used: i64(32), remaining: i64(8)}},
		{name: "shopify 429", status: 429, header: `
			X-Shopify-Shop-Api-Call-Limit: 40/40
			Retry-After: 2.0`,
			want: want{remaining: i64(0), limited: Primary, wait: 2 * time.Second}},
		{name: "zendesk", status: 200, header: `
			X-Rate-Limit: 700
			X-Rate-Limit-Remaining: 699
			zendesk-ratelimit-tickets-index: total=100; remaining=99; resets=8`,
			want: want{limit: i64(100), remaining: i64(99), reset: after(8 * time.Second), resource: str("tickets-index")}},
		{name: "hubspot", status: 200, header: `
			X-HubSpot-RateLimit-Daily: 250000
			X-HubSpot-RateLimit-Daily-Remaining: 249999
			X-HubSpot-RateLimit-Interval-Milliseconds: 10000
			X-HubSpot-RateLimit-Max: 100
			X-HubSpot-RateLimit-Remaining: 99
			X-HubSpot-RateLimit-Secondly: 10
			X-HubSpot-RateLimit-Secondly-Remaining: 9`,
			want: want{limit: i64(10), remaining: i64(9), resource: str("secondly"), window: time.Second}},
		{name: "jira iso reset without seconds", status: 429, header: `
			X-RateLimit-Limit: 100
			X-RateLimit-Remaining: 0
			X-RateLimit-Reset: 2026-01-01T01:00Z
			RateLimit-Reason: jira-quota-tenant-based`,
			want: want{reset: epoch(resetAt), limited: Primary, wait: 754 * time.Second}},
		{name: "mastodon microsecond reset", status: 200, header: `
			X-RateLimit-Limit: 300
			X-RateLimit-Remaining: 299
			X-RateLimit-Reset: 2026-01-01T01:00:00.551054Z`,
			want: want{remaining: i64(299), reset: at(time.Date(2026, 1, 1, 1, 0, 0, 551054000, time.UTC))}},
		{name: "docker hub window", status: 200, header: `
			ratelimit-limit: 100;w=21600
			ratelimit-remaining: 76;w=21600`,
			want: want{limit: i64(100), remaining: i64(76), window: 6 * time.Hour}},
		{name: "linear epoch millis", status: 200, header: `
			X-RateLimit-Requests-Limit: 1500
			X-RateLimit-Requests-Remaining: 1499
			X-RateLimit-Requests-Reset: 1767229200000
			X-RateLimit-Complexity-Limit: 250000
			X-RateLimit-Complexity-Remaining: 249000`,
			want: want{limit: i64(1500), remaining: i64(1499), reset: epoch(resetAt), resource: str("requests")}},
		{name: "google 403 rateLimitExceeded", status: 403, header: `Content-Type: application/json`,
			body: `{"error":{"errors":[{"domain":"usageLimits","reason":"userRateLimitExceeded","message":"User Rate Limit Exceeded"}],"code":403}}`,
			want: want{limited: Primary, wait: DefaultWait}},
		{name: "telegram body retry_after", status: 429, header: `Content-Type: application/json`,
			body: `{"ok":false,"error_code":429,"description":"Too Many Requests: retry after 35","parameters":{"retry_after":35}}`,
			want: want{retryAfter: dur(35 * time.Second), wait: 35 * time.Second, limited: Bare}},
		{name: "upper case names", status: 200, header: `
			X-RATELIMIT-LIMIT: 100
			X-RATELIMIT-REMAINING: 3`,
			want: want{limit: i64(100), remaining: i64(3), used_: []string{"x-ratelimit-limit", "x-ratelimit-remaining"}}},
	})
}

func TestRetryAfterForms(t *testing.T) {
	runCases(t, []parseCase{
		{name: "delta seconds", status: 429, header: `Retry-After: 120`,
			want: want{retryAfter: dur(2 * time.Minute), wait: 2 * time.Minute, limited: Bare, dialect: DialectRetry}},
		{name: "fractional", status: 429, header: `Retry-After: 1.5`,
			want: want{retryAfter: dur(1500 * time.Millisecond), wait: 1500 * time.Millisecond, limited: Bare}},
		{name: "IMF-fixdate", status: 503, header: `Retry-After: Thu, 01 Jan 2026 00:49:26 GMT`,
			want: want{retryAfter: dur(2 * time.Minute), wait: 2 * time.Minute}},
		{name: "RFC 850", status: 503, header: `Retry-After: Thursday, 01-Jan-26 00:49:26 GMT`,
			want: want{retryAfter: dur(2 * time.Minute), wait: 2 * time.Minute}},
		{name: "asctime", status: 503, header: `Retry-After: Thu Jan  1 00:49:26 2026`,
			want: want{retryAfter: dur(2 * time.Minute), wait: 2 * time.Minute}},
		{name: "date in the past clamps to 0", status: 429, header: `Retry-After: Fri, 31 Dec 1999 23:59:59 GMT`,
			want: want{retryAfter: dur(0), wait: 0, limited: Bare}},
		{name: "negative ignored", status: 503, header: `Retry-After: -5`,
			want: want{wait: 0}},
		{name: "garbage ignored", status: 503, header: `Retry-After: soon`,
			want: want{wait: 0, used_: nil}},
		{name: "repeated: the longest", status: 429, header: `
			Retry-After: 5
			Retry-After: 30`,
			want: want{retryAfter: dur(30 * time.Second), wait: 30 * time.Second, limited: Bare}},
		{name: "503 is not a rate limit but asks to wait", status: 503, header: `Retry-After: 10`,
			want: want{limited: NotLimited, wait: 10 * time.Second}},
		{name: "403 with retry-after is a refusal", status: 403, header: `Retry-After: 10`,
			want: want{limited: Bare, wait: 10 * time.Second}},
	})
}

func TestBadInput(t *testing.T) {
	runCases(t, []parseCase{
		{name: "no headers", status: 200, header: `content-type: text/plain`,
			want: want{limit: unknown(), remaining: unknown(), used: unknown(), noReset: true, dialect: DialectNone}},
		{name: "garbage numbers ignored", status: 200, header: `
			x-ratelimit-limit: lots
			x-ratelimit-remaining: -5
			x-ratelimit-used: 1e3
			x-ratelimit-reset: tomorrow`,
			want: want{limit: unknown(), remaining: unknown(), used: unknown(), noReset: true, used_: nil, dialect: DialectNone}},
		{name: "repeated remaining: the least", status: 200, header: `
			x-ratelimit-remaining: 10
			x-ratelimit-remaining: 5`,
			want: want{remaining: i64(5)}},
		{name: "comma-joined repeats", status: 200, header: `
			x-ratelimit-limit: 5000, 60
			x-ratelimit-reset: 1767229200, 1767226046`,
			want: want{limit: i64(60), reset: epoch(resetAt)}},
		{name: "remaining above limit clamps", status: 200, header: `
			x-ratelimit-limit: 100
			x-ratelimit-remaining: 500`,
			want: want{remaining: i64(100)}},
		{name: "remaining above limit minus used clamps", status: 200, header: `
			x-ratelimit-limit: 100
			x-ratelimit-remaining: 90
			x-ratelimit-used: 20`,
			want: want{remaining: i64(80), used: i64(20)}},
		{name: "exhausted without reset", status: 200, header: `x-ratelimit-remaining: 0`,
			want: want{remaining: i64(0), wait: DefaultWait}},
		{name: "reset in the past", status: 429, header: `
			x-ratelimit-remaining: 0
			x-ratelimit-reset: 1372700873`,
			want: want{limited: Primary, wait: 0}},
		{name: "quoted number", status: 200, header: `x-ratelimit-remaining: "42"`,
			want: want{remaining: i64(42)}},
		{name: "huge number ignored", status: 200, header: `x-ratelimit-remaining: 99999999999999999999999`,
			want: want{remaining: unknown()}},
		{name: "unrelated lookalike names ignored", status: 200, header: `
			x-ratelimit-policy: 100;w=60
			x-ratelimit-global: true
			xratelimit-remaining: 1`,
			want: want{remaining: unknown(), used_: nil}},
	})
}

func TestServerTime(t *testing.T) {
	r := Parse(200, headerOf("Date: "+nowDate), nil, now.Add(time.Hour))
	if !r.ServerTime.Equal(now) {
		t.Fatalf("ServerTime = %v, want %v", r.ServerTime, now)
	}
	if got, ok := ServerTime(headerOf("Date: nonsense")); ok {
		t.Fatalf("ServerTime(nonsense) = %v, true", got)
	}
}

func TestParseDoesNotMutateHeader(t *testing.T) {
	h := headerOf("x-ratelimit-remaining: 10\nx-ratelimit-remaining: 5")
	before := h.Clone()
	Parse(200, h, nil, now)
	if !reflect.DeepEqual(h, before) {
		t.Fatalf("header changed: %v", h)
	}
}
