package storetest

import (
	"context"
	"fmt"
	"math/rand/v2"
	"net/url"
	"os"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"
)

// PostgresEnv names the environment variable holding the DSN of the
// PostgreSQL server tests may use. CI always sets it.
const PostgresEnv = "RATEKEEPER_TEST_POSTGRES"

// PostgresBase returns the DSN in PostgresEnv, or skips the test saying
// why when it is unset.
func PostgresBase(t testing.TB) string {
	t.Helper()
	base := os.Getenv(PostgresEnv)
	if base == "" {
		if os.Getenv("CI") != "" {
			t.Fatal("CI must run the PostgreSQL tests, but " + PostgresEnv + " is not set (.ci/run sets it from .ci/pg-start)")
		}
		t.Skip(PostgresEnv + " is not set: PostgreSQL tests skipped (CI sets it; locally: export " + PostgresEnv + "=$(bash .ci/pg-start))")
	}
	return base
}

// NewPostgresSchema creates a schema with a random name on the server at
// base, drops it when the test ends, and returns a DSN whose search_path is
// that schema, so concurrent test packages never see each other's tables.
func NewPostgresSchema(t testing.TB, base string) string {
	t.Helper()
	ctx := context.Background()
	schema := fmt.Sprintf("rk_test_%016x", rand.Uint64())
	conn, err := pgx.Connect(ctx, base)
	if err != nil {
		t.Fatalf("connecting to %s: %v", PostgresEnv, err)
	}
	defer conn.Close(ctx)
	if _, err := conn.Exec(ctx, "CREATE SCHEMA "+schema); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		conn, err := pgx.Connect(ctx, base)
		if err != nil {
			t.Errorf("dropping schema %s: %v", schema, err)
			return
		}
		defer conn.Close(ctx)
		if _, err := conn.Exec(ctx, "DROP SCHEMA "+schema+" CASCADE"); err != nil {
			t.Errorf("dropping schema %s: %v", schema, err)
		}
	})
	u, err := url.Parse(base)
	if err != nil {
		t.Fatalf("%s is not a URL: %v", PostgresEnv, err)
	}
	q := u.Query()
	q.Set("search_path", schema)
	u.RawQuery = q.Encode()
	return u.String()
}

// NewPostgresDatabase creates a database named prefix plus a random suffix
// on the server in PostgresEnv (skipping when it is unset, see
// PostgresBase), drops it when the test ends, and returns its DSN. Use it
// where a schema is not enough, e.g. for River's migrations.
func NewPostgresDatabase(t testing.TB, prefix string) string {
	t.Helper()
	return NewPostgresDatabaseOn(t, PostgresBase(t), prefix)
}

// NewPostgresDatabaseOn is NewPostgresDatabase on the server at base.
func NewPostgresDatabaseOn(t testing.TB, base, prefix string) string {
	t.Helper()
	name := fmt.Sprintf("%s%012x", prefix, rand.Uint64()>>16)
	exec := func(sql string) error {
		ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
		defer cancel()
		conn, err := pgx.Connect(ctx, base)
		if err != nil {
			return err
		}
		defer conn.Close(ctx)
		_, err = conn.Exec(ctx, sql)
		return err
	}
	if err := exec("CREATE DATABASE " + name); err != nil {
		t.Fatalf("creating test database: %v", err)
	}
	t.Cleanup(func() {
		if err := exec("DROP DATABASE IF EXISTS " + name + " WITH (FORCE)"); err != nil {
			t.Errorf("dropping test database %s: %v", name, err)
		}
	})
	u, err := url.Parse(base)
	if err != nil {
		t.Fatalf("the server's DSN is not a URL: %v", err)
	}
	u.Path = "/" + name
	return u.String()
}
