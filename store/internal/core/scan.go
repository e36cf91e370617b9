package core

import (
	"fmt"
	"time"
)

// Scan is what a record row (value, version, updated_at, checksum) is
// scanned into, and the check of what was read.
type Scan interface {
	// Dest are the scan destinations of the four columns.
	Dest() []any
	// Record checks the columns last scanned as key's record; problem says
	// what is wrong, or is empty for a good row.
	Record(key string) (rec Record, problem string)
}

// NewAnyScan scans every column into any and checks the types after:
// SQLite lets any column hold any type, so a damaged row may hold text
// where a number belongs. updated_at is Unix nanoseconds.
func NewAnyScan() Scan {
	s := &anyScan{}
	s.dest = [4]any{&s.value, &s.version, &s.updated, &s.sum}
	return s
}

type anyScan struct {
	value, version, updated, sum any
	dest                         [4]any
}

func (s *anyScan) Dest() []any { return s.dest[:] }

func (s *anyScan) Record(key string) (Record, string) {
	v, ok := s.value.([]byte)
	if !ok {
		if text, isText := s.value.(string); isText {
			v = []byte(text) // the checksum decides whether the bytes are right
		} else {
			return Record{}, fmt.Sprintf("value is %T, want bytes", s.value)
		}
	}
	ver, ok := s.version.(int64)
	if !ok {
		return Record{}, fmt.Sprintf("version is %T %v, want a positive integer", s.version, s.version)
	}
	nanos, ok := s.updated.(int64)
	if !ok {
		return Record{}, fmt.Sprintf("updated_at is %T %v, want Unix nanoseconds", s.updated, s.updated)
	}
	sum, ok := s.sum.(int64)
	if !ok {
		return Record{}, fmt.Sprintf("checksum is %T %v, want an integer", s.sum, s.sum)
	}
	return checkRecord(key, v, ver, time.Unix(0, nanos), sum)
}

// NewTypedScan scans into the columns' types, for a database that
// enforces them (PostgreSQL: bytea, bigint, timestamptz, bigint), so only
// the contents can be wrong.
func NewTypedScan() Scan {
	s := &typedScan{}
	s.dest = [4]any{&s.value, &s.version, &s.updated, &s.sum}
	return s
}

type typedScan struct {
	value        []byte
	version, sum int64
	updated      time.Time
	dest         [4]any
}

func (s *typedScan) Dest() []any { return s.dest[:] }

func (s *typedScan) Record(key string) (Record, string) {
	return checkRecord(key, s.value, s.version, s.updated, s.sum)
}

// checkRecord checks a row's contents: a positive version, a checksum that
// matches the key and value.
func checkRecord(key string, value []byte, version int64, updated time.Time, sum int64) (Record, string) {
	if version < 1 {
		return Record{}, fmt.Sprintf("version is %d, want a positive integer", version)
	}
	if want := Checksum(key, value); sum != want {
		return Record{}, fmt.Sprintf("checksum %d does not match the value (want %d)", sum, want)
	}
	return Record{Key: key, Value: NonNil(value), Version: version, UpdatedAt: updated.UTC()}, ""
}

// checkBlob checks a blob row scanned into any (value, checksum).
func checkBlob(key string, value, sum any) (v []byte, problem string) {
	v, ok := value.([]byte)
	if !ok {
		return nil, fmt.Sprintf("value is %T, want bytes", value)
	}
	if got, ok := sum.(int64); !ok || got != Checksum(key, v) {
		return nil, fmt.Sprintf("checksum %v does not match the value", sum)
	}
	return NonNil(v), ""
}
