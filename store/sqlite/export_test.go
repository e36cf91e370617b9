package sqlite

import (
	"context"

	"github.com/ratekeeper/ratekeeper/store/internal/core"
)

// OpenAtVersion opens the store at path after creating or migrating its
// schema only up to version, so tests can build databases as an older
// ratekeeper left them.
func OpenAtVersion(ctx context.Context, path string, opts core.Options, version int) (*Store, error) {
	return open(ctx, path, opts, version)
}

// Migrations is the SQLite schema's history, for the test that holds it
// to core.SchemaVersion.
var Migrations = migrations
