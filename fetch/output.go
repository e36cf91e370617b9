package fetch

import (
	"bufio"
	"bytes"
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"os"
)

// errLocked: another process holds the output file's lock.
var errLocked = errors.New("locked")

// Output receives the records of a batch, each URL once.
type Output interface {
	// Written reports whether a record for url is already in the output,
	// and whether that record is a failure.
	Written(url string) (failed, ok bool)
	// Append adds records for URLs not yet written, or written as
	// failures (a retry's), durably when the output is a file, and returns
	// how many it added.
	Append(recs []Record) (int, error)
	// Name says where the records go, for messages.
	Name() string
	Close() error
}

// Journal is an output file that is its own record of progress: a URL
// counts as written exactly when a complete line (newline-terminated JSON
// with its "url") holding it is in the file. Opening a journal rebuilds
// that set from the file and cuts off a torn last line, so after a crash at
// any moment — even between writing a line and any other bookkeeping —
// each URL is in the file at most once, and the next run appends the rest.
type Journal struct {
	path  string
	f     *os.File
	owner string
	// written: each URL in the file, and whether its record is a failure.
	written writtenSet
	// Kept counts the complete lines found when opening; Truncated the
	// bytes of a torn last line cut off.
	Kept      int
	Truncated int64
}

// OpenJournal opens (creating if needed) the output file at path and locks
// it against other writers. It fails when the file cannot be read or
// written, when another process holds it, and when a line other than the
// last is not a record (the file is something else; nothing is changed
// then).
func OpenJournal(path string) (*Journal, error) {
	f, err := os.OpenFile(path, os.O_RDWR|os.O_CREATE, 0o644)
	if err != nil {
		return nil, fmt.Errorf("output: %w", err)
	}
	if err := lockFile(f); err != nil {
		f.Close()
		if errors.Is(err, errLocked) {
			return nil, fmt.Errorf("output %s is being written by another ratekeeper fetch; wait for it to end or give another -o", path)
		}
		return nil, fmt.Errorf("output %s: lock: %w", path, err)
	}
	j := &Journal{path: path, f: f, written: writtenSet{}}
	if id, err := fileIdentity(f); err == nil {
		sum := sha256.Sum256([]byte(id))
		j.owner = hex.EncodeToString(sum[:6])
	}
	if err := j.load(); err != nil {
		f.Close()
		return nil, err
	}
	return j, nil
}

// load reads the records already in the file and cuts off a torn tail.
func (j *Journal) load() error {
	r := bufio.NewReaderSize(j.f, 256<<10)
	var (
		offset int64 // where the current line starts
		lineNo int
		tornAt int64 = -1 // where a torn last line starts
	)
	for {
		line, err := r.ReadBytes('\n')
		if len(line) > 0 {
			lineNo++
			if line[len(line)-1] != '\n' {
				// Only the last line can lack its newline (ReadBytes
				// stops at EOF): a write cut short by a crash, if it looks
				// like the start of one of ours.
				if !tornRecord(line) {
					return j.notOurs(lineNo)
				}
				tornAt = offset
			} else {
				url, failed, ok := parseRecordLine(line)
				if !ok {
					return j.notOurs(lineNo)
				}
				j.Kept++
				if prevFailed, dup := j.written[url]; !dup || prevFailed {
					// A later line of a URL (a retry) supersedes a failure.
					j.written[url] = failed
				}
			}
			offset += int64(len(line))
		}
		if err == io.EOF {
			break
		}
		if err != nil {
			return fmt.Errorf("output %s: read: %w", j.path, err)
		}
	}
	if tornAt >= 0 {
		// The last line is torn (a crash in the middle of a write): cut
		// it off; its URLs are written again.
		if err := j.f.Truncate(tornAt); err != nil {
			return fmt.Errorf("output %s: cut off torn last line: %w", j.path, err)
		}
		if err := j.f.Sync(); err != nil {
			return fmt.Errorf("output %s: %w", j.path, err)
		}
		j.Truncated = offset - tornAt
	}
	if _, err := j.f.Seek(0, io.SeekEnd); err != nil {
		return fmt.Errorf("output %s: %w", j.path, err)
	}
	return nil
}

// notOurs is the error for a file that holds something other than records:
// it is left as it is.
func (j *Journal) notOurs(line int) error {
	return fmt.Errorf("output %s: line %d is not a result line (JSON with a \"url\"), so the file is not ratekeeper fetch output; give another -o or remove the file", j.path, line)
}

// tornRecord tells whether an unterminated last line is what a crash
// leaves of an append: the start of a record, or zeros (a file extended
// but not yet written when the machine stopped).
func tornRecord(line []byte) bool {
	return line[0] == '{' || len(bytes.Trim(line, "\x00")) == 0
}

// parseRecordLine reads the url and failure of one complete record line.
func parseRecordLine(line []byte) (url string, failed, ok bool) {
	var rec struct {
		URL   *string `json:"url"`
		Error string  `json:"error"`
	}
	if err := json.Unmarshal(bytes.TrimSpace(line), &rec); err != nil || rec.URL == nil {
		return "", false, false
	}
	return *rec.URL, rec.Error != "", true
}

// Written implements Output.
func (j *Journal) Written(url string) (failed, ok bool) { return j.written.has(url) }

// Append implements Output: one write of every new line, then fsync, so
// that a crash leaves whole lines plus at most one torn one, which the next
// OpenJournal cuts off.
func (j *Journal) Append(recs []Record) (int, error) {
	return j.written.append(recs, func(buf []byte) error {
		if _, err := j.f.Write(buf); err != nil {
			return fmt.Errorf("output %s: write: %w", j.path, err)
		}
		if err := j.f.Sync(); err != nil {
			return fmt.Errorf("output %s: sync: %w", j.path, err)
		}
		return nil
	})
}

// writtenSet maps each URL written to whether its record is a failure.
type writtenSet map[string]bool

func (w writtenSet) has(url string) (failed, ok bool) {
	failed, ok = w[url]
	return failed, ok
}

// append renders the records not written yet (see render), hands their
// lines to write in one call and, once it succeeded, counts them written.
func (w writtenSet) append(recs []Record, write func([]byte) error) (int, error) {
	buf, added, err := render(recs, w)
	if err != nil || len(buf) == 0 {
		return 0, err
	}
	if err := write(buf); err != nil {
		return 0, err
	}
	for _, r := range added {
		w[r.URL] = r.Failed()
	}
	return len(added), nil
}

// render encodes the records whose URL is not in written or written as a
// failure (each once).
func render(recs []Record, written writtenSet) ([]byte, []Record, error) {
	var (
		buf   []byte
		added []Record
		batch = map[string]bool{}
	)
	for _, r := range recs {
		if failed, ok := written[r.URL]; ok && !failed || batch[r.URL] {
			continue
		}
		line, err := r.MarshalLine()
		if err != nil {
			return nil, nil, fmt.Errorf("encode result of %s: %w", r.URL, err)
		}
		buf = append(buf, line...)
		added = append(added, r)
		batch[r.URL] = true
	}
	return buf, added, nil
}

// Name implements Output.
func (j *Journal) Name() string { return j.path }

// Owner names the file on this machine (a digest of host, device and
// inode), or is empty where files cannot be locked. While the journal is
// open no other process has it open: so the tasks that workers named
// after an Owner claimed, and that are still running, belong to runs of
// this output that are gone (killed), and Run takes them back at once.
func (j *Journal) Owner() string { return j.owner }

// Close implements Output; it releases the lock.
func (j *Journal) Close() error { return j.f.Close() }

// Stream writes records to a stream (standard output): each URL once per
// run. It has no memory across runs: a resumed run writes every URL again,
// from the tasks, without fetching finished ones again.
type Stream struct {
	w       io.Writer
	name    string
	written writtenSet
}

// NewStream returns an Output writing to w, called name in messages.
func NewStream(w io.Writer, name string) *Stream {
	return &Stream{w: w, name: name, written: writtenSet{}}
}

// Written implements Output.
func (s *Stream) Written(url string) (failed, ok bool) { return s.written.has(url) }

// Append implements Output.
func (s *Stream) Append(recs []Record) (int, error) {
	return s.written.append(recs, func(buf []byte) error {
		if _, err := s.w.Write(buf); err != nil {
			return fmt.Errorf("write results to %s: %w", s.name, err)
		}
		return nil
	})
}

// Name implements Output.
func (s *Stream) Name() string { return s.name }

// Close implements Output.
func (s *Stream) Close() error { return nil }
