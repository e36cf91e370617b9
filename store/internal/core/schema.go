package core

import (
	"context"
	"errors"
	"fmt"
)

// The tables of the SQLite and PostgreSQL stores all start with
// "ratekeeper_", so they can share a database with River's "river_" tables.
const (
	schemaTable  = "ratekeeper_schema"  // one row: the schema version
	recordsTable = "ratekeeper_records" // Store records
	blobsTable   = "ratekeeper_blobs"   // Blobs
)

// SchemaVersion is the database schema version this build creates and
// understands. Opening a database at an older version migrates it; a newer
// one is refused with a *SchemaTooNewError. Each SQL store's migrations
// (Statements.Migrations) hold one entry per version.
const SchemaVersion = 3

// SchemaTooNewError is returned when opening a database that a newer
// ratekeeper has migrated past what this build knows.
type SchemaTooNewError struct {
	Found     int // the database's version
	Supported int // SchemaVersion of this build
}

func (e *SchemaTooNewError) Error() string {
	return fmt.Sprintf("database schema version %d is newer than this ratekeeper supports (%d); upgrade ratekeeper", e.Found, e.Supported)
}

// checkVersion returns the error for a database at version found, if any.
func checkVersion(found int) error {
	switch {
	case found > SchemaVersion:
		return &SchemaTooNewError{Found: found, Supported: SchemaVersion}
	case found < 0:
		return fmt.Errorf("store: %s holds version %d; a version is never negative, so the table was damaged (set it to the version the tables match, or start a new database)", schemaTable, found)
	}
	return nil
}

// Migrate brings the schema of db to version target (SchemaVersion, or
// older in tests that build databases as an older ratekeeper left them).
// Concurrent openers take turns — Begin's write lock (SQLite) or
// LockSchema (PostgreSQL's advisory lock) — so the second finds the work
// done. The statements run in one transaction with the version bump, so a
// database is always at exactly one version.
func (st *Statements) Migrate(ctx context.Context, db DB, target int) error {
	// Fast path, without the lock (nor PostgreSQL's CREATE privilege): most
	// opens find the schema current.
	var exists bool
	if err := db.QueryRow(ctx, st.SchemaExists).Scan(&exists); err != nil {
		return fmt.Errorf("reading the schema version: %w", err)
	}
	if exists {
		found, err := st.version(ctx, db)
		if err == nil {
			err = checkVersion(found)
		}
		if err != nil || found >= target {
			return err
		}
	}

	tx, err := db.Begin(ctx)
	if err != nil {
		return fmt.Errorf("locking the database to migrate its schema: %w", err)
	}
	defer tx.Rollback(ctx)
	if st.LockSchema != "" {
		if err := tx.Exec(ctx, st.LockSchema); err != nil {
			return fmt.Errorf("locking the schema for migration: %w", err)
		}
	}
	if err := tx.Exec(ctx, st.CreateSchema); err != nil {
		return fmt.Errorf("creating %s: %w", schemaTable, err)
	}
	found, err := st.version(ctx, tx)
	if err == nil {
		err = checkVersion(found)
	}
	if err != nil {
		return err
	}
	for v := found; v < target; v++ {
		for _, stmt := range st.Migrations[v] {
			if err := tx.Exec(ctx, stmt); err != nil {
				return fmt.Errorf("migrating the schema to version %d: %w", v+1, err)
			}
		}
		found = v + 1
	}
	if err := tx.Exec(ctx, st.SetVersion, found); err != nil {
		return fmt.Errorf("recording schema version %d: %w", found, err)
	}
	if err := tx.Commit(ctx); err != nil {
		return fmt.Errorf("committing the schema migration: %w", err)
	}
	return nil
}

// version reads the schema version; a missing row is version 0.
func (st *Statements) version(ctx context.Context, q Conn) (int, error) {
	var v int
	err := q.QueryRow(ctx, st.GetVersion).Scan(&v)
	if errors.Is(err, st.NoRows) {
		return 0, nil
	}
	if err != nil {
		return 0, fmt.Errorf("reading the schema version: %w", err)
	}
	return v, nil
}
