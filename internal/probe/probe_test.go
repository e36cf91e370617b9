package probe

import (
	"context"
	"errors"
	"io"
	"net/http"
	"net/http/httptest"
	"testing"
	"testing/synctest"
)

func get(t *testing.T, h http.Handler, method string) (int, string) {
	t.Helper()
	rec := httptest.NewRecorder()
	h.ServeHTTP(rec, httptest.NewRequest(method, "/", nil))
	body, _ := io.ReadAll(rec.Result().Body)
	return rec.Code, string(body)
}

func TestHealth(t *testing.T) {
	if code, body := get(t, Health(), http.MethodGet); code != 200 || body != "ok\n" {
		t.Errorf("GET: %d %q", code, body)
	}
	if code, _ := get(t, Health(), http.MethodPost); code != http.StatusMethodNotAllowed {
		t.Errorf("POST: %d", code)
	}
}

func TestReady(t *testing.T) {
	var down error
	h := Ready(func(context.Context) error { return down })
	if code, body := get(t, h, http.MethodGet); code != 200 || body != "ready\n" {
		t.Errorf("up: %d %q", code, body)
	}
	down = errors.New("the database does not answer: connection refused")
	if code, body := get(t, h, http.MethodGet); code != 503 || body != "not ready: the database does not answer: connection refused\n" {
		t.Errorf("down: %d %q", code, body)
	}
	down = nil
	if code, _ := get(t, h, http.MethodHead); code != 200 {
		t.Errorf("up again: %d", code)
	}
	if code, _ := get(t, Ready(nil), http.MethodGet); code != 200 {
		t.Errorf("no check: %d", code)
	}
}

// A check that outlasts Timeout is not ready, even if it ends without an
// error of its own.
func TestReadyTimeout(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		err := Run(context.Background(), func(ctx context.Context) error {
			<-ctx.Done()
			return nil
		})
		if err == nil || err.Error() != "no answer within 2s" {
			t.Errorf("err = %v", err)
		}
	})
}
