package postgres

import (
	"errors"
	"io"
	"strings"
	"syscall"

	"github.com/jackc/pgx/v5/pgconn"
)

// IsTransient reports whether err is PostgreSQL (or the way to it) being
// away for a moment rather than refusing the call: the server shutting
// down or restarting (57P01 admin_shutdown, 57P02 crash_shutdown, 57P03
// cannot_connect_now), a lost connection (class 08, a connection refused,
// reset or cut short), or a transaction that lost a conflict with another
// (40001 serialization_failure, 40P01 deadlock_detected). The same call
// made again succeeds once the server is back. A refused password, a
// missing table or a constraint violation is not transient.
func IsTransient(err error) bool {
	if err == nil {
		return false
	}
	var pe *pgconn.PgError
	if errors.As(err, &pe) {
		switch {
		case pe.Code == "57P01", pe.Code == "57P02", pe.Code == "57P03",
			pe.Code == "40001", pe.Code == "40P01",
			strings.HasPrefix(pe.Code, "08"):
			return true
		}
		return false
	}
	switch {
	case errors.Is(err, syscall.ECONNREFUSED), errors.Is(err, syscall.ECONNRESET),
		errors.Is(err, syscall.ECONNABORTED), errors.Is(err, syscall.EPIPE),
		errors.Is(err, io.ErrUnexpectedEOF), errors.Is(err, io.EOF),
		errors.Is(err, pgconn.ErrConnClosed): // a connection pgx found dead
		return true
	}
	return false
}
