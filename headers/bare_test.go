package headers

import "testing"

const proxyPage = `<!DOCTYPE html>
<html><head><title>429 Too Many Requests</title></head>
<body><h1>Too Many Requests</h1><p>Please try again later.</p></body></html>`

// A refusal that states nothing of any quota is bare: a pause of what was
// refused, not a spent bucket. A 403 is bare only when its body is not the
// API's own error; with the API's body it stays what the body says.
func TestBareRefusals(t *testing.T) {
	runCases(t, []parseCase{
		{name: "429 html page from a proxy", status: 429, header: `Content-Type: text/html; charset=utf-8`, body: proxyPage,
			want: want{limited: Bare, wait: DefaultWait, remaining: unknown(), noReset: true}},
		{name: "429 with nothing at all", status: 429,
			want: want{limited: Bare, wait: DefaultWait, remaining: unknown()}},
		{name: "429 plain Retry later", status: 429, header: `Content-Type: text/plain`, body: "Retry later\n",
			want: want{limited: Bare, wait: DefaultWait}},
		{name: "429 page with Retry-After", status: 429, header: `
			Content-Type: text/html
			Retry-After: 30`, body: proxyPage,
			want: want{limited: Bare, retryAfter: dur(30e9), wait: 30e9}},
		{name: "403 html page from a proxy", status: 403, header: `Content-Type: text/html`, body: proxyPage,
			want: want{limited: Bare, wait: DefaultWait}},
		{name: "403 html page without a content type", status: 403, body: "\n" + proxyPage,
			want: want{limited: Bare, wait: DefaultWait}},
		{name: "403 plain text from a filter", status: 403, header: `Content-Type: text/plain`, body: "Access denied\n",
			want: want{limited: Bare, wait: DefaultWait}},
		{name: "429 page while the headers show quota left", status: 429, header: `
			Content-Type: text/html
			x-ratelimit-limit: 5000
			x-ratelimit-remaining: 3990
			x-ratelimit-reset: 1767229200`, body: proxyPage,
			want: want{limited: Secondary, remaining: i64(3990), wait: DefaultWait}},

		// A 403 with the API's own body says what it is.
		{name: "403 API permission error", status: 403, header: `Content-Type: application/json; charset=utf-8`,
			body: `{"message":"Resource not accessible by integration","documentation_url":"https://docs.github.com/rest"}`,
			want: want{limited: NotLimited}},
		{name: "403 JSON without a content type", status: 403,
			body: `{"message":"Must have admin rights to Repository."}`,
			want: want{limited: NotLimited}},
		{name: "403 XML error of an object store", status: 403, header: `Content-Type: application/xml`,
			body: `<?xml version="1.0" encoding="UTF-8"?><Error><Code>AccessDenied</Code></Error>`,
			want: want{limited: NotLimited}},
		{name: "403 XML without a content type", status: 403,
			body: `<?xml version="1.0"?><Error><Code>AccessDenied</Code></Error>`,
			want: want{limited: NotLimited}},
		{name: "403 with no body", status: 403,
			want: want{limited: NotLimited}},
		{name: "403 GitHub secondary message", status: 403, header: `Content-Type: application/json`, body: githubDocsSecondary,
			want: want{limited: Secondary, wait: DefaultWait}},
		{name: "403 GitHub primary message without headers", status: 403, header: `Content-Type: application/json`,
			body: `{"message":"API rate limit exceeded for user ID 1.","documentation_url":"https://docs.github.com/rest/overview/rate-limits-for-the-rest-api"}`,
			want: want{limited: Primary, wait: DefaultWait}},
		{name: "403 page with remaining 0 is primary", status: 403, header: `
			Content-Type: text/html
			x-ratelimit-remaining: 0
			x-ratelimit-reset: 1767229200`, body: proxyPage,
			want: want{limited: Primary, remaining: i64(0), wait: 754e9}},
		{name: "200 html page is no refusal", status: 200, header: `Content-Type: text/html`, body: proxyPage,
			want: want{limited: NotLimited}},
	})
}

func TestBareString(t *testing.T) {
	if got := Bare.String(); got != "bare" {
		t.Errorf("Bare.String() = %q, want bare", got)
	}
}
