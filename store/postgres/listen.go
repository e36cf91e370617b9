package postgres

import (
	"context"
	"time"

	"github.com/jackc/pgx/v5"
)

// relisten is how long Listen waits before connecting again after its
// connection failed.
const relisten = time.Second

// Listen implements store.Notifier with LISTEN on a connection of its
// own, outside the pool: a notification arrives within a round trip of
// the commit that sent it, and waiting costs the database nothing. Each
// time it starts listening — the first time, and after a lost connection
// is made again — it calls fn(""), since what was sent before is lost.
// waiting is not needed: nothing is polled.
//
// A failure is logged once until a connection listens again: a database
// that is away for a minute costs one line, not one a second.
func (s *Store) Listen(ctx context.Context, channel string, fn func(payload string), _ func() bool) error {
	warned := false
	for {
		listened, err := s.listenOnce(ctx, channel, fn)
		if ctx.Err() != nil {
			return ctx.Err()
		}
		if listened {
			warned = false
		}
		if err != nil && !warned {
			warned = true
			s.shared.Opts.Logger.Warn("store: listening for notifications failed; connecting again until it works", "err", err)
		}
		select {
		case <-ctx.Done():
			return ctx.Err()
		case <-time.After(relisten):
		}
	}
}

// listenOnce listens on one connection until it fails or ctx ends;
// listened reports whether it got as far as listening.
func (s *Store) listenOnce(ctx context.Context, channel string, fn func(payload string)) (listened bool, err error) {
	if err := s.shared.Closed.Check(); err != nil {
		return false, err
	}
	conn, err := pgx.ConnectConfig(ctx, s.pool.Config().ConnConfig.Copy())
	if err != nil {
		return false, err
	}
	defer conn.Close(context.WithoutCancel(ctx))
	if _, err := conn.Exec(ctx, `LISTEN `+pgx.Identifier{channel}.Sanitize()); err != nil {
		return false, err
	}
	fn("")
	for {
		n, err := conn.WaitForNotification(ctx)
		if err != nil {
			return true, err
		}
		fn(n.Payload)
	}
}
