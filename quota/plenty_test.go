package quota

import (
	"testing"
	"time"
)

func TestPlenty(t *testing.T) {
	now := time.Date(2026, 11, 27, 12, 0, 0, 0, time.UTC)
	greedy := Ask{Policy: Policy{Kind: Greedy}}
	big := func() Bucket {
		return Bucket{Limit: 5000, Remaining: 4000, Reset: now.Add(30 * time.Minute)}
	}
	cases := []struct {
		name string
		o    func(*Owner)
		b    func(*Bucket)
		a    func(*Ask)
		want bool
	}{
		{"plenty", nil, nil, nil, true},
		{"half the limit left exactly, after the request", nil, func(b *Bucket) { b.Remaining = 2501 }, nil, true},
		{"less than half the limit left", nil, func(b *Bucket) { b.Remaining = 2500 }, nil, false},
		{"in flight counts", nil, func(b *Bucket) {
			b.Remaining = 2600
			for i := range 100 {
				b.Leases = append(b.Leases, Lease{ID: uint64(i + 1), Until: now.Add(time.Minute)})
			}
		}, nil, false},
		{"the reserve counts", nil, nil, func(a *Ask) { a.Policy.Reserve = 1600 }, false},
		{"the floor, whatever the limit", nil, func(b *Bucket) { b.Limit, b.Remaining = 1500, 1000 }, nil, false},
		{"a large limit above the floor", nil, func(b *Bucket) { b.Limit, b.Remaining = 1500, 1001 }, nil, true},
		{"unknown", nil, func(b *Bucket) { *b = NewBucket() }, nil, false},
		{"silent", nil, func(b *Bucket) { b.Silent = true }, nil, false},
		{"a learnt scope", nil, func(b *Bucket) { b.Learnt = true }, nil, false},
		{"blocked", nil, func(b *Bucket) { b.BlockedUntil = now.Add(time.Second) }, nil, false},
		{"owner penalised", func(o *Owner) { o.PenaltyUntil = now.Add(time.Second) }, nil, nil, false},
		{"owner capped", nil, nil, func(a *Ask) { a.Secondary.MaxConcurrent = 100 }, false},
		{"owner's cap learnt", func(o *Owner) { o.Cap, o.Lowered = 10, true }, nil, nil, false},
		{"paced", nil, nil, func(a *Ask) { a.Policy.Kind = Spread }, false},
		{"points in play", nil, nil, func(a *Ask) { a.Cost.Points, a.Secondary.PointsPerMinute = 1, 900 }, false},
		{"points not limited", nil, nil, func(a *Ask) { a.Cost.Points = 1 }, true},
		{"a write spaced", nil, nil, func(a *Ask) { a.Cost.Write, a.Secondary.WriteSpacing = true, time.Second }, false},
		{"a write not spaced", nil, nil, func(a *Ask) { a.Cost.Write = true }, true},
		{"content counted", nil, nil, func(a *Ask) { a.Cost.CreatesContent, a.Secondary.ContentPerMinute = true, 80 }, false},
		{"a min interval", nil, nil, func(a *Ask) { a.Policy.MinDelay, a.Policy.Burst = 100*time.Millisecond, 1 }, false},
		{"GraphQL points", nil, nil, func(a *Ask) { a.Units = 5 }, false},
		{"conditional", nil, nil, func(a *Ask) { a.Conditional = true }, false},
		{"free", nil, nil, func(a *Ask) { a.Free = true }, false},
		{"a scope written down", nil, nil, func(a *Ask) { a.Scope = Default{Limit: 300, Window: 10 * time.Minute} }, false},
	}
	b := big()
	if got := Plenty(&Owner{}, &b, nil, &greedy, now); got != 4000-2500 {
		t.Errorf("Plenty of 4000 left of 5000 = %d, want 1500 (what leaves half the limit)", got)
	}
	b.Limit, b.Remaining = 1200, 1100
	if got := Plenty(&Owner{}, &b, nil, &greedy, now); got != 100 {
		t.Errorf("Plenty of 1100 left of 1200 = %d, want 100 (what leaves the floor)", got)
	}
	b = big()
	learnt := Bucket{Limit: 40, Remaining: 0, Reset: now.Add(5 * time.Second), Learnt: true}
	paused := NewBucket()
	paused.BlockedUntil = now.Add(time.Second)
	for _, s := range []*Bucket{&learnt, &paused} {
		if got := Plenty(&Owner{}, &b, s, &greedy, now); got != 0 {
			t.Errorf("Plenty with a scope learnt or paused = %d, want 0", got)
		}
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			var o Owner
			b, a := big(), greedy
			if c.o != nil {
				c.o(&o)
			}
			if c.b != nil {
				c.b(&b)
			}
			if c.a != nil {
				c.a(&a)
			}
			scope := NewBucket()
			if got := Plenty(&o, &b, &scope, &a, now); (got > 0) != c.want {
				t.Errorf("Plenty = %d, want plentiful %v", got, c.want)
			}
		})
	}
}
