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

// Output receives the records of a batch, each request (each page of it)
// once.
type Output interface {
	// Written reports whether a record of the request named ident
	// (Target.Ident) is already in the output, and what the last one says.
	Written(ident string) (Last, bool)
	// Append adds records of requests (pages) not yet written, or written
	// as failures (a retry's), durably when the output is a file, in one
	// write, and returns how many it added.
	Append(recs []Record) (int, error)
	// Name says where the records go, for messages.
	Name() string
	Close() error
}

// Last is what the output's last record of a request says: where a
// resumed run goes on.
type Last struct {
	// Page is the record's page (0 without pagination).
	Page int
	// Failed says the record is a failure.
	Failed bool
	// PageURL and Cursor are the record's: what fetches that page again.
	PageURL, Cursor string
	// Next is the page after it, if any.
	Next *NextPage
}

func lastOf(r Record) Last {
	return Last{Page: r.Page, Failed: r.Failed(), PageURL: r.PageURL, Cursor: r.Cursor, Next: r.Next}
}

// supersedes reports whether a record described by l, written after prev
// of the same request, is the request's last word: a later page, or the
// same page again after a failure (a retry's).
func (l Last) supersedes(prev Last) bool {
	return l.Page > prev.Page || l.Page == prev.Page && prev.Failed
}

// Journal is an output file that is its own record of progress: a
// request (a page of it) counts as written exactly when a complete line
// (newline-terminated JSON with its "url") holding it is in the file.
// A page's line names the next page, so the line is also the durable
// record of where its listing goes on. Opening a journal rebuilds
// that set from the file and cuts off a torn last line, so after a crash at
// any moment — even between writing a line and any other bookkeeping —
// each URL is in the file at most once, and the next run appends the rest.
type Journal struct {
	path  string
	f     *os.File
	owner string
	// written: the last record of each request in the file.
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
				rec, ok := parseRecordLine(line)
				if !ok {
					return j.notOurs(lineNo)
				}
				j.Kept++
				l := lastOf(rec)
				if prev, dup := j.written[rec.Ident()]; !dup || l.supersedes(prev) {
					j.written[rec.Ident()] = l
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

// parseRecordLine reads what names one complete record line's request and
// where it leaves it.
func parseRecordLine(line []byte) (Record, bool) {
	var rec struct {
		URL     *string         `json:"url"`
		ID      json.RawMessage `json:"id"`
		Page    int             `json:"page"`
		PageURL string          `json:"page_url"`
		Cursor  string          `json:"cursor"`
		Next    *NextPage       `json:"next"`
		Error   string          `json:"error"`
	}
	if err := json.Unmarshal(bytes.TrimSpace(line), &rec); err != nil || rec.URL == nil {
		return Record{}, false
	}
	r := Record{URL: *rec.URL, Page: rec.Page, PageURL: rec.PageURL, Cursor: rec.Cursor, Next: rec.Next, Error: rec.Error}
	if len(rec.ID) > 0 && !isNull(rec.ID) {
		var b bytes.Buffer
		if json.Compact(&b, rec.ID) == nil {
			r.ID = b.Bytes()
		}
	}
	return r, true
}

// Written implements Output.
func (j *Journal) Written(ident string) (Last, bool) { return j.written.has(ident) }

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

// writtenSet maps each request written (its Ident) to its last record.
type writtenSet map[string]Last

func (w writtenSet) has(ident string) (Last, bool) {
	l, ok := w[ident]
	return l, ok
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
		w[r.Ident()] = lastOf(r)
	}
	return len(added), nil
}

// render encodes the records of requests (pages) not in written, or
// written as failures (each once).
func render(recs []Record, written writtenSet) ([]byte, []Record, error) {
	var (
		buf   []byte
		added []Record
		batch = map[string]bool{}
	)
	for _, r := range recs {
		l, in := lastOf(r), r.Ident()+"\x00"+fmt.Sprint(r.Page)
		if prev, ok := written[r.Ident()]; ok && !l.supersedes(prev) || batch[in] {
			continue
		}
		line, err := r.MarshalLine()
		if err != nil {
			return nil, nil, fmt.Errorf("encode result of %s: %w", r.URL, err)
		}
		buf = append(buf, line...)
		added = append(added, r)
		batch[in] = true
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
func (s *Stream) Written(ident string) (Last, bool) { return s.written.has(ident) }

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
