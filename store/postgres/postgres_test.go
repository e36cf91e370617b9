package postgres_test

import (
	"context"
	"net/url"
	"testing"

	"github.com/jackc/pgx/v5"

	"github.com/ratekeeper/ratekeeper/store"
	"github.com/ratekeeper/ratekeeper/store/postgres"
	"github.com/ratekeeper/ratekeeper/store/storetest"
)

var _ store.Store = (*postgres.Store)(nil)

func TestMain(m *testing.M) { storetest.Main(m) }

func TestPostgres(t *testing.T) {
	storetest.Run(t, backend(t))
}

// backend gives every test a schema of its own in the database named by
// RATEKEEPER_TEST_POSTGRES, so parallel test runs cannot collide.
func backend(t testing.TB) storetest.Backend {
	base := storetest.PostgresBase(t)
	return storetest.Backend{
		NewDSN: func(t testing.TB) string { return storetest.NewPostgresSchema(t, base) },
		Exec: func(t *testing.T, dsn, query string) {
			t.Helper()
			conn, err := pgx.Connect(t.Context(), dsn)
			if err != nil {
				t.Fatal(err)
			}
			defer conn.Close(context.Background())
			if _, err := conn.Exec(t.Context(), query); err != nil {
				t.Fatalf("%s: %v", query, err)
			}
		},
		OpenAtVersion: func(ctx context.Context, dsn string, opts store.Options, version int) (store.Store, error) {
			s, err := postgres.OpenAtVersion(ctx, dsn, opts, version)
			if err != nil {
				return nil, err
			}
			return s, nil
		},
		Query: queryInt,
	}
}

func TestMigrationsMatchTheSchemaVersion(t *testing.T) {
	storetest.MigrationsMatch(t, "PostgreSQL", postgres.Migrations)
}

// Advisory values (quota state, cached answers) are committed without
// waiting for the disk, unless the DSN says otherwise; other stores keep
// PostgreSQL's durable default.
func TestAdvisoryCommitsWithoutWaitingForTheDisk(t *testing.T) {
	dsn := backend(t).NewDSN(t)
	withOn := func() string {
		u, err := url.Parse(dsn)
		if err != nil {
			t.Fatal(err)
		}
		q := u.Query()
		q.Set("synchronous_commit", "on")
		u.RawQuery = q.Encode()
		return u.String()
	}()
	for _, tc := range []struct {
		dsn      string
		advisory bool
		want     string
	}{
		{dsn, true, "off"},
		{dsn, false, "on"},
		{withOn, true, "on"},
	} {
		s, err := postgres.Open(t.Context(), tc.dsn, store.Options{Advisory: tc.advisory})
		if err != nil {
			t.Fatal(err)
		}
		got, err := postgres.Setting(t.Context(), s, "synchronous_commit")
		s.Close()
		if err != nil {
			t.Fatal(err)
		}
		if got != tc.want {
			t.Errorf("Advisory %v with %s: synchronous_commit = %q; want %q", tc.advisory, tc.dsn, got, tc.want)
		}
	}
}

func BenchmarkUpdate(b *testing.B) {
	s, err := postgres.Open(b.Context(), backend(b).NewDSN(b), store.Options{})
	if err != nil {
		b.Fatal(err)
	}
	defer s.Close()
	storetest.BenchmarkUpdate(b, s)
}
