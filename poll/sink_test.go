package poll

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"net/http"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"testing/synctest"
	"time"
)

func TestExecSinkGetsTheBodyAndEnvironment(t *testing.T) {
	dir := t.TempDir()
	t.Setenv("OUT", filepath.Join(dir, "out"))
	var stdout, stderr bytes.Buffer
	s := Exec(`cat > "$OUT"; printf '%s|%s|%s|%s' "$RATEKEEPER_POLL_URL" "$RATEKEEPER_POLL_ETAG" "$RATEKEEPER_POLL_NEW_ITEMS" "$RATEKEEPER_POLL_CHANGED_AT" > "$OUT.env"; echo done`, &stdout, &stderr)
	at := time.Date(2025, 6, 10, 1, 2, 3, 0, time.UTC)
	c := Change{URL: "https://x/e", ETag: `"e2"`, ChangedAt: at, Body: []byte(`[{"id":2},{"id":1}]`), Items: true,
		NewItems: []json.RawMessage{json.RawMessage(`{"id":2}`)}}
	if err := s.Emit(context.Background(), c); err != nil {
		t.Fatal(err)
	}
	body, _ := os.ReadFile(filepath.Join(dir, "out"))
	env, _ := os.ReadFile(filepath.Join(dir, "out.env"))
	if string(body) != `[{"id":2},{"id":1}]` {
		t.Fatalf("stdin %q", body)
	}
	if string(env) != `https://x/e|"e2"|1|2025-06-10T01:02:03Z` {
		t.Fatalf("environment %q", env)
	}
	if stdout.String() != "done\n" {
		t.Fatalf("stdout %q", stdout.String())
	}
}

func TestExecFailureIsReportedAndPollingGoesOn(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		s := &scripted{handlers: []func(http.ResponseWriter, *http.Request){body(`"a"`, "a"), body(`"b"`, "b"), body(`"c"`, "c")}}
		failing := SinkFunc(func(ctx context.Context, c Change) error {
			return &ExecError{Command: "false", URL: c.URL, Err: errors.New("exit status 1")}
		})
		rec := &recorder{}
		ctx, cancel := context.WithCancel(t.Context())
		defer cancel()
		rec.onPoll = func(n int, e Event) {
			if n == 4 {
				cancel()
			}
		}
		p, err := New(Options{URLs: []string{"http://api.test/x"}, Client: &http.Client{Transport: s}, Policy: utcPolicy(), Sink: failing, OnEvent: rec.event})
		if err != nil {
			t.Fatal(err)
		}
		if err := p.Run(ctx); err != nil {
			t.Fatalf("Run: %v", err)
		}
		failed := rec.kinds(EventExecFailed)
		if len(failed) != 2 || !strings.Contains(failed[0].String(), `--exec "false" for a change of http://api.test/x: exit status 1`) {
			t.Fatalf("%d exec failures: %+v", len(failed), failed)
		}
	})
}

func TestExecCommandFailing(t *testing.T) {
	var stderr bytes.Buffer
	err := Exec("echo oops >&2; exit 3", &bytes.Buffer{}, &stderr).Emit(context.Background(), Change{URL: "https://x/y"})
	var ee *ExecError
	if !errors.As(err, &ee) || !strings.Contains(err.Error(), "exit status 3") || stderr.String() != "oops\n" {
		t.Fatalf("%v, stderr %q", err, stderr.String())
	}
}
