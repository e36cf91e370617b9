package kv

import (
	"context"

	"github.com/ratekeeper/ratekeeper/internal/sqlitedb"
)

// OpenAtVersion opens the store at dsn after creating or migrating its
// schema only up to version, so tests can build databases as an older
// ratekeeper left them.
func OpenAtVersion(ctx context.Context, dsn string, opts Options, version int) (Store, error) {
	if sqlitedb.IsPostgres(dsn) {
		s, err := openPostgres(ctx, dsn, opts, version)
		if err != nil {
			return nil, err
		}
		return s, nil
	}
	s, err := openSQLite(ctx, dsn, opts, version)
	if err != nil {
		return nil, err
	}
	return s, nil
}
