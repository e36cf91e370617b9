package quotastate

import (
	"context"
	"errors"
	"time"

	"github.com/ratekeeper/ratekeeper/transport"
)

// Learning turns. Keys:
//
//	learn/PROVIDER   {"holder": …, "until": time, "seq": n}
//
// One process at a time holds a provider's learning turn (see
// transport.LearningTurns): while some of its tokens' buckets are unknown,
// each of its requests takes it, so the counters in the answers it reads
// were moved by no other process's learning request. The sequence number
// tells a process whether another held the turn since it last did.

var _ transport.LearningTurns = (*State)(nil)

type turn struct {
	Holder string    `json:"holder,omitempty"`
	Until  time.Time `json:"until,omitzero"`
	Seq    uint64    `json:"seq"`
}

func turnKey(k string) string { return key("learn", k) }

// errTurnHeld aborts a taking that found the turn held: nothing is written.
var errTurnHeld = errors.New("turn held")

// TakeLearningTurn implements transport.LearningTurns.
func (st *State) TakeLearningTurn(ctx context.Context, p *transport.TurnParams) (transport.TurnTaken, error) {
	var got transport.TurnTaken
	// The turn's end is a shared time: on the database's clock, like a
	// lease's, so a process whose clock runs ahead cannot take a turn
	// that has not ended.
	off, err := st.offset(ctx)
	if err != nil {
		return got, err
	}
	now, until := p.Now.Add(off), p.Until.Add(off)
	err = update(ctx, st, turnKey(p.Key), func() turn { return turn{} }, func(v *turn) error {
		free := v.Holder == "" || v.Holder == p.Holder || !now.Before(v.Until) || v.Holder == p.Gone
		if !free {
			got = transport.TurnTaken{Seq: v.Seq, Holder: v.Holder}
			return errTurnHeld
		}
		v.Holder, v.Until = p.Holder, until.UTC()
		v.Seq++
		got = transport.TurnTaken{Taken: true, Seq: v.Seq}
		return nil
	})
	if errors.Is(err, errTurnHeld) {
		return got, nil
	}
	return got, err
}

// GiveLearningTurn implements transport.LearningTurns.
func (st *State) GiveLearningTurn(ctx context.Context, k, holder string) error {
	return update(ctx, st, turnKey(k), func() turn { return turn{} }, func(v *turn) error {
		if v.Holder == holder {
			v.Holder, v.Until = "", time.Time{}
		}
		return nil
	})
}
