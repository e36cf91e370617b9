package quota

import (
	"reflect"
	"testing"
	"time"
)

// Clone shares no memory with what it copies: every slice and map field
// of Bucket and Owner (found by reflection, so a field added later without
// a copy in Clone fails here) is filled, cloned, and the clone's changed.
func TestCloneSharesNothing(t *testing.T) {
	now := time.Date(2026, 11, 25, 12, 0, 0, 0, time.UTC)
	b := Bucket{Limit: 10, Leases: Leases{{ID: 1, Until: now}}, Unstated: []time.Time{now}, Uncounted: []uint64{1}}
	o := Owner{Leases: Leases{{ID: 2, Until: now}}, Points: map[string]Spent{"a": {{At: now, N: 1}}},
		ContentMinute: Spent{{At: now, N: 1}}, ContentHour: Spent{{At: now, N: 1}}}
	for _, v := range []any{&b, &o} {
		rv := reflect.ValueOf(v).Elem()
		for i := range rv.NumField() {
			f := rv.Field(i)
			if (f.Kind() == reflect.Slice || f.Kind() == reflect.Map) && f.Len() == 0 {
				t.Fatalf("%s.%s is empty in this test: fill it, and copy it in Clone", rv.Type().Name(), rv.Type().Field(i).Name)
			}
			if f.Kind() == reflect.Pointer {
				t.Fatalf("%s.%s is a pointer: copy it in Clone, and here", rv.Type().Name(), rv.Type().Field(i).Name)
			}
		}
	}
	bc, oc := b.Clone(), o.Clone()
	if !reflect.DeepEqual(bc, b) || !reflect.DeepEqual(oc, o) {
		t.Fatalf("clones differ: %+v %+v", bc, oc)
	}
	bc.Leases[0].ID, bc.Unstated[0], bc.Uncounted[0], oc.Leases[0].ID, oc.Points["a"] = 9, now.Add(time.Second), 9, 9, nil
	oc.ContentMinute[0].N, oc.ContentHour[0].N = 9, 9
	if b.Leases[0].ID != 1 || !b.Unstated[0].Equal(now) || b.Uncounted[0] != 1 || o.Leases[0].ID != 2 || o.Points["a"] == nil || o.ContentMinute[0].N != 1 || o.ContentHour[0].N != 1 {
		t.Fatalf("a change to a clone reached the original: %+v %+v", b, o)
	}
}
