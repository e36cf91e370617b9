package ratekeeper

import (
	"net/http"
	"net/http/httptest"
	"testing"
)

// TestNewGateway: the façade builds the same gateway `ratekeeper serve`
// runs, from the client's Options.
func TestNewGateway(t *testing.T) {
	gw, err := NewGateway(GatewayOptions{Client: Options{Tokens: map[string][]string{"github": {"tok-gateway-0001"}}}})
	if err != nil {
		t.Fatal(err)
	}
	defer gw.Close()
	rec := httptest.NewRecorder()
	gw.ServeHTTP(rec, httptest.NewRequest("GET", "/healthz", nil))
	if rec.Code != http.StatusOK {
		t.Fatalf("/healthz: %d %s", rec.Code, rec.Body)
	}
	if _, err := NewGateway(GatewayOptions{Client: Options{Policy: "fastest"}}); err == nil {
		t.Fatal("a bad client policy was accepted")
	}
}
