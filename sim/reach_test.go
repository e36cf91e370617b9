package sim

import (
	"net/http"
	"strings"
	"testing"
)

func TestReach(t *testing.T) {
	srv, err := New(Config{APIs: []APIConfig{{
		Dialect: DialectGitHub,
		Tokens:  []TokenConfig{{Token: "tok-reach-1", Owner: "reach"}},
		Limit:   10,
	}}})
	if err != nil {
		t.Fatal(err)
	}
	get := func(root string, wire http.RoundTripper) (int, error) {
		req, _ := http.NewRequest(http.MethodGet, root+"/repos/octo/hello-world", nil)
		req.Header.Set("Authorization", "Bearer tok-reach-1")
		resp, err := wire.RoundTrip(req)
		if err != nil {
			return 0, err
		}
		resp.Body.Close()
		return resp.StatusCode, nil
	}

	root, wire, stop, err := srv.Reach(false, 3)
	if err != nil {
		t.Fatal(err)
	}
	if !strings.HasPrefix(root, "http://127.0.0.1:") {
		t.Errorf("root %q: want a loopback URL", root)
	}
	if tr, ok := wire.(*http.Transport); !ok || tr.MaxIdleConnsPerHost != 3 {
		t.Errorf("wire %T keeps %v idle connections, want 3", wire, wire)
	}
	if code, err := get(root, wire); err != nil || code != http.StatusOK {
		t.Fatalf("GET over loopback: %d, %v", code, err)
	}
	stop()
	if _, err := get(root, wire); err == nil {
		t.Error("the server still answers after stop")
	}

	root, wire, stop, err = srv.Reach(true, 3)
	if err != nil {
		t.Fatal(err)
	}
	defer stop()
	if root != "http://sim.invalid" {
		t.Errorf("in-process root %q", root)
	}
	if code, err := get(root, wire); err != nil || code != http.StatusOK {
		t.Fatalf("GET in-process: %d, %v", code, err)
	}
	if got := srv.Stats().Total.Requests; got != 2 {
		t.Errorf("the simulator saw %d requests, want 2", got)
	}
}
