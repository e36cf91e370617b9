package quotastate

import (
	"context"
	"slices"
	"testing"

	"github.com/ratekeeper/ratekeeper/store"
	"github.com/ratekeeper/ratekeeper/store/memory"
)

func TestBlindOwnersAreShared(t *testing.T) {
	ctx := context.Background()
	s, err := memory.New(store.Options{})
	if err != nil {
		t.Fatal(err)
	}
	a, b := New(s, nil), New(s, nil)
	if got, err := a.LoadBlind(ctx, "github"); err != nil || len(got) != 0 {
		t.Fatalf("nothing learnt yet: %v, %v", got, err)
	}
	for _, o := range []string{"acme", "globex", "acme"} {
		if err := a.AddBlind(ctx, "github", "token:1", o); err != nil {
			t.Fatal(err)
		}
	}
	if err := b.AddBlind(ctx, "github", "token:2", "dora"); err != nil {
		t.Fatal(err)
	}
	got, err := b.LoadBlind(ctx, "github")
	if err != nil || !slices.Equal(got["token:1"], []string{"acme", "globex"}) || !slices.Equal(got["token:2"], []string{"dora"}) {
		t.Errorf("LoadBlind = %v, %v", got, err)
	}
	if got, _ := a.LoadBlind(ctx, "gitlab"); len(got) != 0 {
		t.Errorf("another provider: %v", got)
	}
}
