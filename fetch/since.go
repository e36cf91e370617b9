package fetch

import (
	"bufio"
	"encoding/json"
	"fmt"
	"io"
	"os"
	"strconv"

	"github.com/ratekeeper/ratekeeper/tasks"
)

// A re-sync runs yesterday's list again and pays only for what changed:
// each URL whose previous answer (a line of a previous run's output) had
// a validator and a body is sent conditional on it, and an unchanged
// resource — a 304, free on GitHub — repeats that answer's line, marked
// not_modified. On GitHub the validator is sent as the tag the server
// gives the credential going now (the rate-keeping client computes it
// from the previous body), so a token rotated since is no obstacle.

// ReadPrevious reads a previous run's output and returns, by request
// (Record.Ident: its URL, or its id), the successful answer of each (its
// last such line); pages of a listing are left out. Lines that are not
// records — a torn last line — are skipped.
func ReadPrevious(r io.Reader) (map[string]Record, error) {
	br := bufio.NewReaderSize(r, 256<<10)
	out := map[string]Record{}
	for {
		line, err := br.ReadBytes('\n')
		if len(line) > 0 && line[len(line)-1] == '\n' {
			var rec Record
			if json.Unmarshal(line, &rec) == nil && rec.URL != "" && !rec.Failed() && rec.Page == 0 {
				out[rec.Ident()] = rec
			}
		}
		if err == io.EOF {
			return out, nil
		}
		if err != nil {
			return nil, err
		}
	}
}

// ReadPreviousFile is ReadPrevious of the file at path.
func ReadPreviousFile(path string) (map[string]Record, error) {
	f, err := os.Open(path)
	if err != nil {
		return nil, fmt.Errorf("--since: %w", err)
	}
	defer f.Close()
	prev, err := ReadPrevious(f)
	if err != nil {
		return nil, fmt.Errorf("--since %s: %w", path, err)
	}
	return prev, nil
}

// Resync makes each GET target that has a usable previous answer in prev
// revalidate it: its request carries the answer (tasks.HTTPPrevious), and
// its key names the task that fetched that answer, so that a re-sync
// finds neither the tasks of the run it re-syncs nor those of earlier
// ones, while a killed re-sync run, run again, finds its own. It returns
// how many targets will revalidate. An answer without a validator, a body
// or a 2xx status is fetched afresh.
func Resync(targets []Target, prev map[string]Record) int {
	n := 0
	for i := range targets {
		t := &targets[i]
		rec, ok := prev[t.Ident()]
		if !ok || t.Request.Method != "" || t.Request.Body != "" {
			continue
		}
		base := requestKey(t.Request)
		if t.ID != nil {
			base = "id: " + string(t.ID) + "\n" + base
		}
		p := &tasks.HTTPPrevious{Status: rec.Status, ETag: rec.ETag, SHA256: rec.SHA256, Size: rec.Size,
			Body: rec.Body, BodyFile: rec.BodyFile}
		c := *t
		c.Request.Previous = p
		c.Key = taskKey(base + "#since-" + strconv.FormatInt(rec.TaskID, 10) + "-" + rec.SHA256)
		if c.check() != nil {
			continue
		}
		*t = c
		n++
	}
	return n
}
