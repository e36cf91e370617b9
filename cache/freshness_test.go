package cache

import (
	"net/http"
	"testing"
	"time"
)

// TestEvaluate checks the freshness verdict against the cases of RFC 9111
// §4.2 and §5.2: lifetimes, the age calculation, and each request and
// response directive.
func TestEvaluate(t *testing.T) {
	t0 := time.Date(2026, 3, 1, 12, 0, 0, 0, time.UTC)
	date := t0.Format(http.TimeFormat)
	h := func(kv ...string) http.Header {
		out := http.Header{}
		for i := 0; i < len(kv); i += 2 {
			out.Add(kv[i], kv[i+1])
		}
		return out
	}
	gh := h("Cache-Control", "private, max-age=60, s-maxage=30", "Date", date)
	cases := []struct {
		name     string
		resp     http.Header
		sent     time.Duration // request_time − t0
		received time.Duration // response_time − t0
		req      http.Header
		at       time.Duration // now − t0
		shared   bool
		want     Use
		age      time.Duration
	}{
		{name: "max-age, young", resp: gh, at: 59 * time.Second, want: ServeFresh, age: 59 * time.Second},
		{name: "max-age, as old as its lifetime", resp: gh, at: 60 * time.Second, want: MustRevalidate, age: 60 * time.Second},
		{name: "a shared cache takes s-maxage", resp: gh, at: 31 * time.Second, shared: true, want: MustRevalidate, age: 31 * time.Second},
		{name: "a private cache ignores s-maxage", resp: gh, at: 31 * time.Second, want: ServeFresh, age: 31 * time.Second},
		{name: "Expires minus Date", resp: h("Date", date, "Expires", t0.Add(time.Minute).Format(http.TimeFormat)), at: 30 * time.Second, want: ServeFresh, age: 30 * time.Second},
		{name: "max-age wins over Expires", resp: h("Date", date, "Expires", t0.Add(time.Hour).Format(http.TimeFormat), "Cache-Control", "max-age=10"), at: 30 * time.Second, want: MustRevalidate, age: 30 * time.Second},
		{name: "an invalid Expires is already expired", resp: h("Date", date, "Expires", "0"), at: time.Second, want: MustRevalidate, age: time.Second},
		{name: "no lifetime, no heuristic", resp: h("Date", date, "Last-Modified", t0.Add(-24*time.Hour).Format(http.TimeFormat)), at: time.Second, want: MustRevalidate, age: time.Second},
		{name: "an invalid max-age is stale", resp: h("Date", date, "Cache-Control", "max-age=soon"), at: 0, want: MustRevalidate},
		{name: "Age from upstream counts, plus the round trip", resp: h("Date", date, "Age", "50", "Cache-Control", "max-age=60"),
			sent: 0, received: 2 * time.Second, at: 9 * time.Second, want: ServeFresh, age: 59 * time.Second},
		{name: "Age from upstream, a second later", resp: h("Date", date, "Age", "50", "Cache-Control", "max-age=60"),
			sent: 0, received: 2 * time.Second, at: 10 * time.Second, want: MustRevalidate, age: 60 * time.Second},
		{name: "apparent age from Date when the server's clock is behind", resp: h("Date", t0.Add(-20*time.Second).Format(http.TimeFormat), "Cache-Control", "max-age=60"),
			at: 30 * time.Second, want: ServeFresh, age: 50 * time.Second},
		{name: "a Date ahead of our clock makes no negative age", resp: h("Date", t0.Add(time.Hour).Format(http.TimeFormat), "Cache-Control", "max-age=60"),
			at: 10 * time.Second, want: ServeFresh, age: 10 * time.Second},
		{name: "response no-cache always revalidates", resp: h("Date", date, "Cache-Control", "no-cache, max-age=60"), at: 0, want: MustRevalidate},
		{name: "response no-cache with field names too", resp: h("Date", date, "Cache-Control", `no-cache="Set-Cookie, X-Foo", max-age=60`), at: 0, want: MustRevalidate},
		{name: "request no-cache", resp: gh, req: h("Cache-Control", "no-cache"), at: time.Second, want: MustRevalidate, age: time.Second},
		{name: "request no-store", resp: gh, req: h("Cache-Control", "no-store"), at: time.Second, want: MustRevalidate, age: time.Second},
		{name: "Pragma no-cache without Cache-Control", resp: gh, req: h("Pragma", "no-cache"), at: time.Second, want: MustRevalidate, age: time.Second},
		{name: "Pragma is ignored beside Cache-Control", resp: gh, req: h("Pragma", "no-cache", "Cache-Control", "max-stale=1"), at: time.Second, want: ServeFresh, age: time.Second},
		{name: "request max-age=0", resp: gh, req: h("Cache-Control", "max-age=0"), at: time.Second, want: MustRevalidate, age: time.Second},
		{name: "request max-age accepts younger", resp: gh, req: h("Cache-Control", "max-age=10"), at: 10 * time.Second, want: ServeFresh, age: 10 * time.Second},
		{name: "request max-age refuses older", resp: gh, req: h("Cache-Control", "max-age=10"), at: 11 * time.Second, want: MustRevalidate, age: 11 * time.Second},
		{name: "min-fresh met", resp: gh, req: h("Cache-Control", "min-fresh=20"), at: 39 * time.Second, want: ServeFresh, age: 39 * time.Second},
		{name: "min-fresh not met", resp: gh, req: h("Cache-Control", "min-fresh=20"), at: 40 * time.Second, want: MustRevalidate, age: 40 * time.Second},
		{name: "max-stale without a value accepts any staleness", resp: gh, req: h("Cache-Control", "max-stale"), at: time.Hour, want: ServeStale, age: time.Hour},
		{name: "max-stale=N accepts up to N", resp: gh, req: h("Cache-Control", "max-stale=30"), at: 90 * time.Second, want: ServeStale, age: 90 * time.Second},
		{name: "max-stale=N refuses beyond", resp: gh, req: h("Cache-Control", "max-stale=30"), at: 91 * time.Second, want: MustRevalidate, age: 91 * time.Second},
		{name: "max-stale keeps fresh fresh", resp: gh, req: h("Cache-Control", "max-stale=30"), at: 5 * time.Second, want: ServeFresh, age: 5 * time.Second},
		{name: "must-revalidate refuses max-stale", resp: h("Date", date, "Cache-Control", "max-age=60, must-revalidate"), req: h("Cache-Control", "max-stale"), at: 61 * time.Second, want: MustRevalidate, age: 61 * time.Second},
		{name: "proxy-revalidate binds a shared cache", resp: h("Date", date, "Cache-Control", "max-age=60, proxy-revalidate"), req: h("Cache-Control", "max-stale"), at: 61 * time.Second, shared: true, want: MustRevalidate, age: 61 * time.Second},
		{name: "proxy-revalidate does not bind a private cache", resp: h("Date", date, "Cache-Control", "max-age=60, proxy-revalidate"), req: h("Cache-Control", "max-stale"), at: 61 * time.Second, want: ServeStale, age: 61 * time.Second},
		{name: "GitLab's max-age=0 must-revalidate", resp: h("Date", date, "Cache-Control", "max-age=0, private, must-revalidate"), req: h("Cache-Control", "max-stale"), at: 0, want: MustRevalidate},
		{name: "case and spaces in directives", resp: h("Date", date, "Cache-Control", " Private ,MAX-AGE=60"), at: 30 * time.Second, want: ServeFresh, age: 30 * time.Second},
		{name: "a huge max-age does not overflow", resp: h("Date", date, "Cache-Control", "max-age=99999999999999999999"), req: h("Cache-Control", "min-fresh=99999999999999999999"), at: time.Hour, want: MustRevalidate, age: time.Hour},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			s := Stored{Header: c.resp, RequestTime: t0.Add(c.sent), ResponseTime: t0.Add(c.received)}
			f := Evaluate(s, c.req, t0.Add(c.at), c.shared)
			if f.Use != c.want || f.Age != c.age {
				t.Errorf("Evaluate = %v, age %v (lifetime %v); want %v, age %v", f.Use, f.Age, f.Lifetime, c.want, c.age)
			}
		})
	}
}
