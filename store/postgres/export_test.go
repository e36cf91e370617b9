package postgres

import (
	"context"

	"github.com/ratekeeper/ratekeeper/store/internal/core"
)

// OpenAtVersion opens the store at dsn after creating or migrating its
// schema only up to version, so tests can build databases as an older
// ratekeeper left them.
func OpenAtVersion(ctx context.Context, dsn string, opts core.Options, version int) (*Store, error) {
	return open(ctx, dsn, opts, version)
}

// Migrations is the PostgreSQL schema's history, for the test that holds
// it to core.SchemaVersion.
var Migrations = migrations

// Setting reads a session setting of one of the store's connections.
func Setting(ctx context.Context, s *Store, name string) (string, error) {
	var v string
	err := s.pool.QueryRow(ctx, "SELECT current_setting($1)", name).Scan(&v)
	return v, err
}
