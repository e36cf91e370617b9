package sqlite

import (
	"context"
	"database/sql"
	"time"
)

// DataVersionPoll is how often Listen reads PRAGMA data_version while
// someone waits: a reader's query of a page the database keeps in memory,
// no transaction that writes, and a wake at most this long after another
// process's commit.
const DataVersionPoll = 50 * time.Millisecond

// Listen implements store.Notifier for processes of one machine. SQLite
// cannot carry a message from one process to another, and a file lock
// or a socket of our own beside the database would be one more thing to
// clean up after a crash; but PRAGMA data_version, read on one
// connection, moves whenever another connection commits. So while
// waiting() reports someone waiting, Listen reads it every
// DataVersionPoll on a connection it holds (of its own pool: see
// Store.watch), and calls fn("") when it
// moved (the payload is unknown: every commit counts, this process's
// own too). When the wait starts it also calls fn(""), since a commit
// may have come between the waiter's look and the first read.
func (s *Store) Listen(ctx context.Context, channel string, fn func(payload string), waiting func() bool) error {
	tick := time.NewTicker(DataVersionPoll)
	defer tick.Stop()
	var conn *sql.Conn
	var last int64
	defer func() {
		if conn != nil {
			conn.Close()
		}
	}()
	for {
		select {
		case <-ctx.Done():
			return ctx.Err()
		case <-tick.C:
		}
		if !waiting() {
			if conn != nil {
				conn.Close()
				conn = nil
			}
			continue
		}
		first := conn == nil
		if first {
			var err error
			if conn, err = s.watch.Conn(ctx); err != nil {
				continue
			}
		}
		var v int64
		if err := conn.QueryRowContext(ctx, `PRAGMA data_version`).Scan(&v); err != nil {
			conn.Close()
			conn = nil
			continue
		}
		if first || v != last {
			fn("")
		}
		last = v
	}
}
