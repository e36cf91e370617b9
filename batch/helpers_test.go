package batch_test

import (
	"bytes"
	"encoding/json"
	"errors"
	"io"
	"net/http"
	"testing"

	"github.com/ratekeeper/ratekeeper/creds"
	"github.com/ratekeeper/ratekeeper/provider"
	"github.com/ratekeeper/ratekeeper/quota"
	"github.com/ratekeeper/ratekeeper/sim"
	"github.com/ratekeeper/ratekeeper/transport"
)

// simAPI is a simulated API served in process, and a rate-keeping
// transport with its tokens in front of it.
type simAPI struct {
	t    *transport.Transport
	srv  *sim.Server
	base string
}

// newSimAPI serves api in process (no sockets) under http://sim.test,
// with a transport holding the given tokens.
func newSimAPI(t testing.TB, api sim.APIConfig, tokens ...string) *simAPI {
	t.Helper()
	return newSimAPIWith(t, api, nil, tokens...)
}

// newSimAPIWith is newSimAPI with the provider changed by tune.
func newSimAPIWith(t testing.TB, api sim.APIConfig, tune func(*provider.Provider), tokens ...string) *simAPI {
	t.Helper()
	return newSimAPIOpts(t, api, tune, nil, tokens...)
}

// newSimAPIOpts is newSimAPIWith with the transport's options changed by
// topts.
func newSimAPIOpts(t testing.TB, api sim.APIConfig, tune func(*provider.Provider), topts func(*transport.Options), tokens ...string) *simAPI {
	t.Helper()
	srv, err := sim.New(sim.Config{Seed: 1, APIs: []sim.APIConfig{api}})
	if err != nil {
		t.Fatal(err)
	}
	base := "http://sim.test" + map[string]string{"gitlab": "/api/v4", "gitea": "/api/v1"}[api.Dialect]
	kind := provider.Kind(api.Dialect)
	p, err := provider.New(string(kind), kind, base)
	if err != nil {
		t.Fatal(err)
	}
	if tune != nil {
		tune(p)
	}
	reg := provider.NewRegistry()
	if err := reg.Add(p); err != nil {
		t.Fatal(err)
	}
	var cs []*creds.Credential
	for i, tok := range tokens {
		cs = append(cs, creds.NewToken(p.Name, i+1, tok, "test"))
	}
	o := transport.Options{
		Providers: reg,
		Pools:     map[string]*creds.Pool{p.Name: creds.NewPool(p.Name, cs...)},
		Base:      srv.Transport(""),
		Policy:    quota.Policy{Kind: quota.Greedy},
	}
	if topts != nil {
		topts(&o)
	}
	tr, err := transport.New(o)
	if err != nil {
		t.Fatal(err)
	}
	return &simAPI{t: tr, srv: srv, base: base}
}

func get(t testing.TB, url string) *http.Request {
	t.Helper()
	req, err := http.NewRequest(http.MethodGet, url, nil)
	if err != nil {
		t.Fatal(err)
	}
	return req
}

// graphqlQuery is a query GitHub prices at n + 1 points: 1 + 100 + 100·n
// nodes, ÷ 100 (n from 1 to 8: 2 to 9 points).
const graphqlQuery = `query($n: Int!) { viewer { repositories(first: 100) { nodes { issues(first: $n) { nodes { labels(first: 1) { totalCount } } } } } } }`

// graphqlPost builds a replayable GraphQL request.
func graphqlPost(t testing.TB, url string, vars map[string]any) *http.Request {
	t.Helper()
	b, err := json.Marshal(map[string]any{"query": graphqlQuery, "variables": vars})
	if err != nil {
		t.Fatal(err)
	}
	req, err := http.NewRequest(http.MethodPost, url, bytes.NewReader(b))
	if err != nil {
		t.Fatal(err)
	}
	return req
}

// strictBody reads like a connection's body: not at all once closed.
type strictBody struct {
	r      *bytes.Reader
	closed bool
}

func (b *strictBody) Read(p []byte) (int, error) {
	if b.closed {
		return 0, errors.New("read on a closed body")
	}
	return b.r.Read(p)
}

func (b *strictBody) Close() error { b.closed = true; return nil }

// strict gives req a body and GetBody of strictBody.
func strict(t testing.TB, req *http.Request) *http.Request {
	t.Helper()
	b, err := io.ReadAll(req.Body)
	if err != nil {
		t.Fatal(err)
	}
	req.GetBody = func() (io.ReadCloser, error) { return &strictBody{r: bytes.NewReader(b)}, nil }
	req.Body, _ = req.GetBody()
	return req
}
