package headers

import (
	"testing"
	"time"
)

// The language-model APIs' refusals: each header form and each body is
// read exactly, and a refusal that names its limit is that limit's.
func TestLanguageModelRefusals(t *testing.T) {
	const openaiHeaders = `
		x-ratelimit-limit-requests: 500
		x-ratelimit-remaining-requests: 480
		x-ratelimit-reset-requests: 2.4s
		x-ratelimit-limit-tokens: 20000
		x-ratelimit-remaining-tokens: 300
		x-ratelimit-reset-tokens: 59.1s`
	runCases(t, []parseCase{
		{name: "openai tokens: retry-after-ms wins over the rounded retry-after", status: 429, header: openaiHeaders + `
			retry-after-ms: 2400
			retry-after: 3`,
			body: `{"error":{"message":"Rate limit reached for gpt-4o-mini in organization org-acme on tokens per min (TPM): Limit 20000, Used 19700, Requested 540. Please try again in 2.4s. Visit https://platform.openai.com/account/rate-limits to learn more.","type":"tokens","param":null,"code":"rate_limit_exceeded"}}`,
			want: want{limit: i64(20000), remaining: i64(300), reset: after(59100 * time.Millisecond), resource: str("tokens"),
				retryAfter: dur(2400 * time.Millisecond), limited: Primary, wait: 2400 * time.Millisecond}},
		{name: "openai requests named by its type", status: 429, header: `
			x-ratelimit-limit-requests: 3
			x-ratelimit-remaining-requests: 0
			x-ratelimit-reset-requests: 20s
			x-ratelimit-limit-tokens: 40000
			x-ratelimit-remaining-tokens: 39000
			x-ratelimit-reset-tokens: 1.5s
			retry-after: 20`,
			body: `{"error":{"message":"Rate limit reached for model in organization org-x on requests per min (RPM): Limit 3, Used 3, Requested 1. Please try again in 20s.","type":"requests","param":null,"code":"rate_limit_exceeded"}}`,
			want: want{limit: i64(3), remaining: i64(0), resource: str("requests"), retryAfter: dur(20 * time.Second), limited: Primary, wait: 20 * time.Second}},
		{name: "openai body alone: try again in", status: 429, header: openaiHeaders,
			body: `{"error":{"message":"Rate limit reached on tokens per min (TPM): Limit 20000, Used 19700, Requested 540. Please try again in 1.898s. Visit https://platform.openai.com/account/rate-limits to learn more.","type":"tokens"}}`,
			want: want{resource: str("tokens"), retryAfter: dur(1898 * time.Millisecond), limited: Primary, wait: 1898 * time.Millisecond}},
		{name: "try again in milliseconds and minutes", status: 429,
			body: `{"error":{"message":"Please try again in 6m0s.","type":"requests"}}`,
			want: want{retryAfter: dur(6 * time.Minute), limited: Primary, wait: 6 * time.Minute}},
		{name: "anthropic input tokens", status: 429, header: `
			anthropic-ratelimit-requests-limit: 50
			anthropic-ratelimit-requests-remaining: 49
			anthropic-ratelimit-requests-reset: 2026-01-01T00:47:28Z
			anthropic-ratelimit-input-tokens-limit: 30000
			anthropic-ratelimit-input-tokens-remaining: 120
			anthropic-ratelimit-input-tokens-reset: 2026-01-01T00:48:26Z
			anthropic-ratelimit-output-tokens-limit: 8000
			anthropic-ratelimit-output-tokens-remaining: 7000
			anthropic-ratelimit-output-tokens-reset: 2026-01-01T00:47:34Z
			retry-after: 5`,
			body: `{"type":"error","error":{"type":"rate_limit_error","message":"This request would exceed the rate limit for your organization of 30,000 input tokens per minute. For details, refer to: https://docs.claude.com/en/api/rate-limits."}}`,
			want: want{limit: i64(30000), remaining: i64(120), reset: after(time.Minute), resource: str("input-tokens"),
				retryAfter: dur(5 * time.Second), limited: Primary, wait: 5 * time.Second}},
		{name: "anthropic output tokens", status: 429, header: `
			anthropic-ratelimit-requests-limit: 50
			anthropic-ratelimit-requests-remaining: 10
			anthropic-ratelimit-output-tokens-limit: 8000
			anthropic-ratelimit-output-tokens-remaining: 900
			anthropic-ratelimit-output-tokens-reset: 2026-01-01T00:47:34Z
			retry-after: 8`,
			body: `{"type":"error","error":{"type":"rate_limit_error","message":"This request would exceed your organization's rate limit of 8000 output tokens per minute."}}`,
			want: want{remaining: i64(900), reset: after(8 * time.Second), resource: str("output-tokens"), retryAfter: dur(8 * time.Second), limited: Primary, wait: 8 * time.Second}},
		{name: "groq requests per day: a duration reset", status: 429, header: `
			x-ratelimit-limit-requests: 14400
			x-ratelimit-remaining-requests: 0
			x-ratelimit-reset-requests: 2m59.56s
			x-ratelimit-limit-tokens: 6000
			x-ratelimit-remaining-tokens: 5800
			x-ratelimit-reset-tokens: 2s`,
			body: `{"error":{"message":"Rate limit reached for model llama-3.1-8b-instant in organization org_01 service tier on_demand on requests per day (RPD): Limit 14400, Used 14400, Requested 1. Please try again in 2m59.56s.","type":"requests","code":"rate_limit_exceeded"}}`,
			want: want{limit: i64(14400), remaining: i64(0), reset: after(179560 * time.Millisecond), resource: str("requests"),
				retryAfter: dur(179560 * time.Millisecond), limited: Primary, wait: 179560 * time.Millisecond}},
		{name: "groq answer: the tokens bucket has least left", status: 200, header: `
			x-ratelimit-limit-requests: 14400
			x-ratelimit-remaining-requests: 14370
			x-ratelimit-reset-requests: 2m59.56s
			x-ratelimit-limit-tokens: 6000
			x-ratelimit-remaining-tokens: 5800
			x-ratelimit-reset-tokens: 2s`,
			want: want{limit: i64(6000), remaining: i64(5800), reset: after(2 * time.Second), resource: str("tokens")}},
		{name: "gemini RetryInfo", status: 429,
			body: `{"error":{"code":429,"message":"You exceeded your current quota.","status":"RESOURCE_EXHAUSTED","details":[{"@type":"type.googleapis.com/google.rpc.RetryInfo","retryDelay":"13s"}]}}`,
			// It names no limit and states no count: a pause of 13 s, not a spent bucket.
			want: want{retryAfter: dur(13 * time.Second), limited: Bare, wait: 13 * time.Second}},
		{name: "a 200 mentioning try again is content", status: 200, body: `{"text":"please try again in 5s"}`,
			want: want{}},
	})
}

func TestParseForOneBucket(t *testing.T) {
	h := headerOf(`
		x-ratelimit-limit-requests: 500
		x-ratelimit-remaining-requests: 480
		x-ratelimit-reset-requests: 2.4s
		x-ratelimit-limit-tokens: 20000
		x-ratelimit-remaining-tokens: 19000
		x-ratelimit-reset-tokens: 3s`)
	r := ParseFor(200, h, nil, now, "tokens")
	check(t, r, want{limit: i64(20000), remaining: i64(19000), reset: after(3 * time.Second), resource: str("tokens")})
	r = ParseFor(429, h, []byte(`{"error":{"message":"… on requests per min (RPM) …","type":"requests"}}`), now, "tokens")
	check(t, r, want{limit: i64(500), remaining: i64(480), resource: str("requests"), limited: Primary, wait: 2400 * time.Millisecond})
	if r := ParseFor(200, h, nil, now, "output-tokens"); r.Resource != "requests" {
		t.Errorf("a bucket the answer does not describe: %q, want the most restrictive", r.Resource)
	}
}
