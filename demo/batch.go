package demo

import "fmt"

// Job is one GET of the batch.
type Job struct {
	// Path is relative to the API's base URL, e.g. "/repos/acme/anvil".
	Path string
	// Kind says what it fetches: "repository", "readme", "issues", or
	// "repeat" for a second GET of a URL fetched earlier in the batch.
	Kind string
}

// Job kinds.
const (
	KindRepository = "repository"
	KindReadme     = "readme"
	KindIssues     = "issues"
	KindRepeat     = "repeat"
)

var (
	orgs  = []string{"acme", "globex", "initech", "umbrella", "hooli", "wonka", "tyrell", "cyberdyne"}
	words = []string{"anvil", "rocket", "ledger", "beacon", "compass", "harbor", "lantern", "meadow",
		"orbit", "prism", "quartz", "summit", "timber", "vertex", "willow", "zephyr"}
)

// Batch returns size GETs as a crawler of repositories would send them:
// for each repository its metadata, its README and two pages of issues;
// then, for the last fifth of the batch, a second pass over the first
// repositories' metadata. Those repeats are what conditional requests make
// free: an unchanged resource is answered 304, which GitHub does not charge.
// The same size always gives the same batch.
func Batch(size int) []Job {
	if size <= 0 {
		return nil
	}
	repeats := size / 5
	distinct := size - repeats
	jobs := make([]Job, 0, size)
	for i := 0; len(jobs) < distinct; i++ {
		repo := repoPath(i)
		for _, j := range []Job{
			{Path: repo, Kind: KindRepository},
			{Path: repo + "/readme", Kind: KindReadme},
			{Path: repo + "/issues?per_page=100&page=1", Kind: KindIssues},
			{Path: repo + "/issues?per_page=100&page=2", Kind: KindIssues},
		} {
			if len(jobs) == distinct {
				break
			}
			jobs = append(jobs, j)
		}
	}
	// Repeat repository metadata from the start of the batch, long done
	// by the time the second pass comes (every fourth job is one).
	for i := 0; len(jobs) < size; i++ {
		jobs = append(jobs, Job{Path: jobs[(i*4)%distinct].Path, Kind: KindRepeat})
	}
	return jobs
}

// repoPath names the i-th repository: /repos/ORG/WORD-WORD.
func repoPath(i int) string {
	org := orgs[i%len(orgs)]
	n := i / len(orgs)
	name := words[n%len(words)]
	if k := n / len(words); k > 0 {
		name = fmt.Sprintf("%s-%s", name, words[(k-1)%len(words)])
		if k > len(words) {
			name = fmt.Sprintf("%s-%d", name, k/len(words))
		}
	}
	return "/repos/" + org + "/" + name
}

// distinctPaths counts the different URLs of a batch: the requests a
// perfect client has to pay for.
func distinctPaths(jobs []Job) int {
	seen := make(map[string]struct{}, len(jobs))
	for _, j := range jobs {
		seen[j.Path] = struct{}{}
	}
	return len(seen)
}
