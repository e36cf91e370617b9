package cache_test

import (
	"fmt"
	"io"
	"net/http"
	"net/http/httptest"

	"github.com/ratekeeper/ratekeeper/cache"
)

// cachingTransport is the cache's part of a RoundTripper.
type cachingTransport struct {
	cache *cache.Cache
	owner string // whose credential the requests carry; "" for anonymous
	next  http.RoundTripper
}

func (t *cachingTransport) RoundTrip(req *http.Request) (*http.Response, error) {
	// Prepare sets validators, so it works on a copy; a retry starts from
	// a new copy of the caller's request and calls Prepare again.
	req = req.Clone(req.Context())
	entry := t.cache.Prepare(req, t.owner)
	resp, err := t.next.RoundTrip(req)
	if err != nil {
		return nil, err
	}
	if entry != nil && resp.StatusCode == http.StatusNotModified {
		return t.cache.Revalidated(entry, resp), nil
	}
	return t.cache.Store(req, t.owner, resp)
}

func Example() {
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		w.Header().Set("ETag", `"v1"`)
		if r.Header.Get("If-None-Match") == `"v1"` {
			w.WriteHeader(http.StatusNotModified) // free on GitHub
			return
		}
		fmt.Fprint(w, `{"login":"octocat"}`)
	}))
	defer srv.Close()

	client := &http.Client{Transport: &cachingTransport{
		cache: cache.New(cache.Options{}),
		owner: "octocat",
		next:  http.DefaultTransport,
	}}
	for range 2 {
		resp, err := client.Get(srv.URL + "/user")
		if err != nil {
			panic(err)
		}
		body, _ := io.ReadAll(resp.Body)
		resp.Body.Close()
		fmt.Println(resp.StatusCode, resp.Header.Get(cache.HeaderName), string(body))
	}
	// Output:
	// 200 miss {"login":"octocat"}
	// 200 revalidated {"login":"octocat"}
}
