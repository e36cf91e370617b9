// Package headers reads what an HTTP response says about rate limits.
//
// [Parse] turns a response's status, header and the first few kilobytes of
// its body, at a given now, into a [Reading]: limit, remaining, used, reset,
// retry-after, resource, whether the response was a rate-limit refusal
// (primary or secondary), the server's time, GitHub's poll interval, the
// wait a client should observe on this reading alone, and the headers used.
// It is a pure function: no clock, no I/O, no state.
//
// # Dialects
//
//   - GitHub: x-ratelimit-limit, -remaining, -used, -reset (Unix seconds),
//     -resource; X-Poll-Interval; primary refusals (403 or 429 with
//     remaining 0, or the "API rate limit exceeded" message); secondary
//     limits (403 or 429 whose body carries the documented "secondary rate
//     limit" / "abuse detection" message or documentation URL), with or
//     without retry-after; GraphQL's 200 with a RATE_LIMITED error.
//   - GitLab: RateLimit-Limit, -Observed (used), -Remaining, -Reset (Unix
//     seconds), -ResetTime (HTTP-date), -Name (resource), Retry-After.
//   - IETF draft (draft-ietf-httpapi-ratelimit-headers-08 to -11): the
//     structured fields RateLimit ("name";r=;t=;pk=) and RateLimit-Policy
//     ("name";q=;w=;qu=;pk=), parsed as RFC 9651 Lists with
//     github.com/dunglas/httpsfv, items possibly split over several field
//     lines. Each RateLimit item is matched with the policy of the same name
//     for its quota and window. Draft-07's dictionary form
//     (RateLimit: limit=100, remaining=50, reset=30) and the earlier drafts'
//     RateLimit-Limit/-Remaining/-Reset are read too.
//   - Everything else of the x-ratelimit-*, x-rate-limit-*, ratelimit-*
//     and vendor-ratelimit-* families, in any letter case: -reset-after
//     (Discord, fractional seconds), -bucket, per-kind headers such as
//     x-ratelimit-remaining-requests / -tokens (OpenAI) or
//     anthropic-ratelimit-requests-remaining, per-period headers such as
//     x-ratelimit-remaining-minute, and x-ratelimit-retry-after.
//   - Retry-After as delay-seconds (fractions accepted) or as any of RFC
//     9110's three HTTP-date forms; retry-after-ms and x-ms-retry-after-ms in
//     milliseconds; a JSON body's "retry_after" (seconds) on refusals, or
//     the delay its message states ("Please try again in 2.4s", OpenAI and
//     Groq; Gemini's "retryDelay": "13s"). A millisecond header is exact
//     and wins over a Retry-After sent with it, which can only round up.
//
// # Rules
//
// Values:
//   - A bare number of a reset is a Unix time when it is nearer to now's
//     Unix time than to zero — today, anything from 1998 on — in milliseconds
//     when it is nearer to now's Unix milliseconds; smaller numbers are delta
//     seconds. No real window lasts decades and no real reset lies decades
//     back, so the magnitude tells them apart whatever the header's name
//     claims (GitLab sends Unix times in RateLimit-Reset, which the drafts
//     define as delta seconds).
//   - A reset may also be a duration string ("6m0s", "1m20.5s", "20ms"), an
//     RFC 3339 timestamp or an HTTP-date. *-reset-after is always relative.
//   - Counts may be fractional ("598.0"): limit and remaining are rounded
//     down, used up, so a reading never overstates what is left.
//   - Negative numbers, signs, exponents, NaN, and anything unparsable are
//     ignored, as is a whole header that yields nothing readable.
//   - A header repeated (several field lines, or one line joined with
//     commas) resolves to its most conservative value: the least limit and
//     remaining, the most used, the latest reset, the longest retry-after.
//   - Contradictions resolve conservatively: remaining above the limit is
//     taken as the limit; remaining above limit minus used is taken as limit
//     minus used.
//   - A Retry-After date in the past means 0.
//
// Several buckets in one response (IETF policies, -requests and -tokens,
// -minute and -hour): the reading reports the most restrictive one — the one
// with the least remaining, then the one that resets last. Buckets counted
// in units other than requests (IETF qu="content-bytes") only count when
// they are used up. A refusal that names the limit it hit (OpenAI's error
// "type": "tokens" or "requests"; "input tokens per minute", "requests per
// day" in Anthropic's and Groq's messages) reports that limit's bucket, a
// primary refusal even with some left: less than the request costs in its
// units. Malformed IETF items (no r, r negative or not a number;
// policies without q) are ignored, the rest of the field still counts.
// Values that are not valid structured syntax but close (tokens for names,
// spaces around "=", upper-case keys) are read leniently with the same item
// rules.
//
// Refusals:
//   - 429 (and 420) are always rate-limit refusals.
//   - 403 is a permission error unless remaining is 0, the body carries a
//     rate-limit message, or Retry-After is present — or it states nothing
//     at all: no rate-limit count or reset, and a body that is a page for
//     people (HTML or plain text) rather than the API's own error, as a
//     proxy or an abuse filter in front of the API answers. A 403 with no
//     body at all stays a permission error (HEAD answers have none).
//   - A refusal is secondary when the body says so (GitHub's secondary limit
//     message or documentation anchor, the IETF abnormal-usage problem type)
//     or when the headers still show quota remaining (the limit that refused
//     is not the one they describe, as with GitLab's 429s from other
//     throttles); else bare when the headers state no count and no reset
//     (a Retry-After alone may come with it): a proxy's 429 page,
//     GitLab's headerless 429 or plain "Retry later" — it says nothing of
//     any quota, so a client pauses rather than taking the quota as spent;
//     otherwise it is primary.
//
// The wait, on this reading alone:
//   - Retry-After (in any of its forms) takes precedence when present, as
//     RFC 9110 and the IETF draft require.
//   - Secondary refusal: until the reset when remaining is 0, else
//     [DefaultWait] (60 s, GitHub's documented minimum).
//   - Primary refusal, or remaining 0 on any response: until the reset, or
//     DefaultWait when the response does not say when.
//   - Bare refusal: DefaultWait (how much less a client may wait elsewhere
//     than on GitHub is for its provider to say).
//   - Otherwise 0: pacing within the quota is the job of package quota.
//   - Never negative: a reset in the past gives 0.
//
// # Time and clock skew
//
// Parse takes times as they are stated and puts relative values on the
// clock of now: a Unix reset is that instant; a delta reset is now plus the
// delta. It does not correct clock skew itself; Reading.ServerTime carries
// the response's Date so the caller can (package quota does). A caller that
// wants every time on the server's clock passes the server's time as now.
//
// Layer 0 of docs/architecture.md: it owns reading rate-limit headers, and
// must not know about tokens or any clock but the now it is given.
package headers
