package main

import (
	"errors"
	"net/http"
	"net/http/httptest"
	"os"
	"os/exec"
	"path/filepath"
	"testing"
	"time"
)

// A get stopped by Ctrl-C while its request is at the server exits 130,
// as fetch does and a shell reports it, not 1 as for a failure.
func TestGetInterruptedExits130(t *testing.T) {
	arrived := make(chan struct{}, 1)
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		arrived <- struct{}{}
		<-r.Context().Done() // until the client goes
	}))
	defer srv.Close()
	p := startProcess(t, nil, "get", "--db", filepath.Join(t.TempDir(), "rk.db"), srv.URL+"/slow")
	select {
	case <-arrived:
	case <-time.After(30 * time.Second):
		t.Fatalf("the request never arrived:\n%s", p.out())
	}
	if err := p.cmd.Process.Signal(os.Interrupt); err != nil {
		t.Fatal(err)
	}
	err := <-p.done
	var ee *exec.ExitError
	if !errors.As(err, &ee) || ee.ExitCode() != 130 {
		t.Fatalf("get interrupted: %v, want exit status 130:\n%s", err, p.out())
	}
}
