package demo

import (
	"fmt"
	"io"
	"strings"

	"github.com/ratekeeper/ratekeeper/creds"
	"github.com/ratekeeper/ratekeeper/transport"
)

// masked returns the client's masked form of each token, in order.
func masked(t *transport.Transport) []string {
	pool, err := t.Pool(APIName)
	if err != nil {
		return nil
	}
	var out []string
	for _, c := range pool.Credentials() {
		out = append(out, c.Masked())
	}
	return out
}

// writeIntro says what the demo is about to do.
func writeIntro(w io.Writer, sc Scenario, base string, names []string, jobs []Job, opts Options) {
	fmt.Fprintf(w, "ratekeeper demo: a simulated GitHub API at %s\n", base)
	fmt.Fprintf(w, "  %s, rolling windows, GitHub's secondary limits, %s latency\n", sc.describeLimit(), opts.Latency)
	fmt.Fprintln(w, "tokens given to the client (made up, known only to this simulator):")
	shared := sc.SharedOwners()
	for i, t := range sc.Tokens {
		name := fmt.Sprintf("#%d", i+1)
		if i < len(names) {
			name = names[i]
		}
		switch {
		case !t.Valid():
			fmt.Fprintf(w, "  %-10s revoked: the server answers 401, so ratekeeper must stop using it\n", name)
		case len(shared[t.Owner]) > 1 && shared[t.Owner][0] == i+1:
			fmt.Fprintf(w, "  %-10s %-6s tokens %s belong to the same user: ratekeeper detects it and paces them as one bucket\n",
				name, t.Owner, joinIndexes(shared[t.Owner]))
		default:
			fmt.Fprintf(w, "  %-10s %s\n", name, t.Owner)
		}
	}
	distinct := distinctPaths(jobs)
	fmt.Fprintf(w, "batch: %d GETs (repositories, READMEs, issue pages: %d distinct URLs, then %d of them again), %d workers, policy %s\n",
		len(jobs), distinct, len(jobs)-distinct, opts.Workers, opts.Policy)
	ideal, _ := Ideal(distinct, len(sc.Owners()), sc.Limit, sc.Window, opts.Workers, opts.Latency)
	fmt.Fprintf(w, "physical limit: %d owners × %d / %s = %s requests/s; a perfect client would take about %s\n",
		len(sc.Owners()), sc.Limit, shortDuration(sc.Window), trimFloat(sc.PhysicalRate()), roundDuration(ideal))
}

// writeChecks says what checking the tokens taught the client.
func writeChecks(w io.Writer, s Snapshot) {
	var parts []string
	shown := map[int]bool{}
	for _, t := range s.Tokens {
		if shown[t.Index] {
			continue
		}
		switch {
		case t.State == creds.Invalid.String():
			parts = append(parts, fmt.Sprintf("#%d rejected", t.Index))
		case t.Owner == "":
			parts = append(parts, fmt.Sprintf("#%d unknown", t.Index))
		case len(t.SharedWith) > 0:
			ids := append([]int{t.Index}, t.SharedWith...)
			for _, i := range ids {
				shown[i] = true
			}
			parts = append(parts, fmt.Sprintf("%s → %s (one bucket)", joinIndexes(ids), t.Owner))
		default:
			parts = append(parts, fmt.Sprintf("#%d → %s", t.Index, t.Owner))
		}
	}
	fmt.Fprintf(w, "checked the tokens (GET /user, free GET /rate_limit) in %s: %s\n", roundDuration(s.Elapsed), strings.Join(parts, ", "))
}
