package quotastate_test

import (
	"context"
	"testing"
	"time"

	"github.com/ratekeeper/ratekeeper/store"
	"github.com/ratekeeper/ratekeeper/store/quotastate"
	"github.com/ratekeeper/ratekeeper/store/storetest"
	"github.com/ratekeeper/ratekeeper/transport"
)

// The learning turn is held by one process at a time: another waits until
// it is given back, it lapses, or its holder is proven gone; its sequence
// number tells a process whether another held it in between.
func TestLearningTurn(t *testing.T) {
	for name, open := range map[string]func(t *testing.T) store.Store{
		"sqlite": openSQLite,
		"postgres": func(t *testing.T) store.Store {
			s, err := store.Open(t.Context(), storetest.NewPostgresSchema(t, storetest.PostgresBase(t)), store.Options{})
			if err != nil {
				t.Fatal(err)
			}
			t.Cleanup(func() { s.Close() })
			return s
		},
	} {
		t.Run(name, func(t *testing.T) { exerciseLearningTurn(t, quotastate.New(open(t), nil)) })
	}
}

func exerciseLearningTurn(t *testing.T, st *quotastate.State) {
	ctx := context.Background()
	now := time.Unix(1_000_000, 0)
	take := func(holder, gone string, at time.Time) transport.TurnTaken {
		t.Helper()
		got, err := st.TakeLearningTurn(ctx, &transport.TurnParams{Key: "github", Holder: holder, Gone: gone, Now: at, Until: at.Add(time.Minute)})
		if err != nil {
			t.Fatal(err)
		}
		return got
	}
	give := func(holder string) {
		t.Helper()
		if err := st.GiveLearningTurn(ctx, "github", holder); err != nil {
			t.Fatal(err)
		}
	}
	if got := take("a", "", now); !got.Taken || got.Seq != 1 {
		t.Fatalf("a free turn: %+v", got)
	}
	if got := take("b", "", now); got.Taken || got.Holder != "a" || got.Seq != 1 {
		t.Fatalf("a held turn was taken: %+v", got)
	}
	give("b") // not b's: nothing happens
	if got := take("b", "", now); got.Taken {
		t.Fatalf("another holder gave a's turn back: %+v", got)
	}
	give("a")
	if got := take("b", "", now); !got.Taken || got.Seq != 2 {
		t.Fatalf("a turn given back: %+v", got)
	}
	if got := take("a", "b", now); !got.Taken || got.Seq != 3 {
		t.Fatalf("the turn of a gone holder: %+v", got)
	}
	if got := take("b", "", now.Add(time.Minute)); !got.Taken || got.Seq != 4 {
		t.Fatalf("a lapsed turn: %+v", got)
	}
	if got, err := st.TakeLearningTurn(ctx, &transport.TurnParams{Key: "gitlab", Holder: "a", Now: now, Until: now.Add(time.Minute)}); err != nil || !got.Taken || got.Seq != 1 {
		t.Fatalf("another provider's turn: %+v %v", got, err)
	}
}
