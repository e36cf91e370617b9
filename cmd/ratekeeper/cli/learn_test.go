package cli

import (
	"encoding/json"
	"fmt"
	"strings"
	"testing"

	"github.com/ratekeeper/ratekeeper/transport"
)

func TestReserveAndPauseFlags(t *testing.T) {
	_, url := startSim(t)
	for _, c := range []struct {
		args []string
		want string
	}{
		{[]string{"--reserve", "ten"}, `--reserve "ten": want a count of requests kept back in every bucket, such as 100, or a percentage`},
		{[]string{"--reserve", "100%"}, `--reserve "100%": want a percentage from 0% up to (not including) 100%`},
		{[]string{"--reserve", "-3"}, `--reserve "-3"`},
		{[]string{"--secondary-wait", "0s"}, "--secondary-wait 0s: want a duration of a second or more"},
		{[]string{"--max-pause", "10ms"}, "--max-pause 10ms: want a duration of a second or more"},
		{[]string{"--burst", "-1"}, "--burst -1: want 0 or more requests, such as 10"},
		{[]string{"--velocity", "-2"}, "--velocity -2: want a number above 0 such as 1.5"},
		{[]string{"--min-interval", "2s", "--max-interval", "1s"}, "--min-interval 2s is above --max-interval 1s: want the min at most the max"},
	} {
		args := append([]string{"get", "--provider", "github=" + url}, c.args...)
		_, stderr, code := run(t, "", append(args, url+"/repos/o/r")...)
		if code != 2 || !strings.Contains(stderr, c.want) {
			t.Errorf("%v: exit %d, %q; want exit 2 saying %q", c.args, code, stderr, c.want)
		}
	}
	if _, stderr, code := run(t, "", "get", "--provider", "github="+url, "--reserve", "10%", "--secondary-wait", "6s", "--max-pause", "10m",
		"--policy", "spread", "--velocity", "1", "--min-interval", "10ms", "--max-interval", "1s", "--burst", "5", url+"/repos/o/r"); code != 0 {
		t.Fatalf("--reserve 10%%: exit %d: %s", code, stderr)
	}
}

// TestReserveAboveALimitFailsClearly: --reserve 100 leaves nothing of
// GitHub's search (30 a minute). A search goes with a credential whose
// search limit is not known yet; once every credential's answer told it,
// the next search fails saying so instead of waiting for ever.
func TestReserveAboveALimitFailsClearly(t *testing.T) {
	_, url := startSim(t)
	get := func(path string) (string, int) {
		_, stderr, code := run(t, "", "get", "--provider", "github="+url, "--reserve", "100", url+path)
		return stderr, code
	}
	// tok-alice-1, tok-alice-2 and tok-bob-1 each tell their limit once;
	// tok-wrong-9 is rejected.
	const want = "github search: the reserve of 100 requests leaves nothing of this resource's limit of 30"
	for i := range 5 {
		// Another query each time: a repeat would be served fresh
		// from the shared cache, without quota.
		stderr, code := get(fmt.Sprintf("/search/repositories?q=a%d", i))
		if code == 0 {
			if i == 4 {
				t.Fatal("the fifth search went, though every credential's limit is known")
			}
			continue
		}
		if code != 1 || !strings.Contains(stderr, want) || i < 3 {
			t.Fatalf("search %d: exit %d, %q", i+1, code, stderr)
		}
		break
	}
	// A percentage applies to each resource's own limit.
	if _, stderr, code := run(t, "", "get", "--provider", "github="+url, "--reserve", "10%", url+"/search/repositories?q=c"); code != 0 {
		t.Fatalf("search with --reserve 10%%: exit %d: %s", code, stderr)
	}
}

func TestStatusShowsConcurrency(t *testing.T) {
	_, url := startSim(t)
	if _, stderr, code := run(t, "", "get", "--provider", "github="+url, url+"/repos/o/r"); code != 0 {
		t.Fatalf("get: exit %d: %s", code, stderr)
	}
	out, stderr, code := run(t, "", "status", "--provider", "github="+url)
	if code != 0 {
		t.Fatalf("status: exit %d: %s", code, stderr)
	}
	if !strings.Contains(out, "CONCURRENCY") || !strings.Contains(out, "4/20 ramping") {
		t.Fatalf("status does not show the owner's cap:\n%s", out)
	}
	out, _, _ = run(t, "", "status", "--provider", "github="+url, "--json")
	var rep transport.StatusReport
	if err := json.Unmarshal([]byte(out), &rep); err != nil {
		t.Fatal(err)
	}
	for _, c := range rep.Credentials {
		if c.Concurrency != nil && c.Concurrency.Cap == 4 && c.Concurrency.Max == 20 && c.Concurrency.Ramping {
			return
		}
	}
	t.Fatalf("no credential with its owner's cap in the JSON: %s", out)
}
