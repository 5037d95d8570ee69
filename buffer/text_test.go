package buffer

import (
	"fmt"
	"testing"
)

// The policies' config spellings, both ways, and the name of a value
// without one.
func TestPolicySpellings(t *testing.T) {
	for _, tc := range []struct {
		v    fmt.Stringer
		want string
	}{
		{Always, "always"}, {Interval, "interval"}, {Durability(2), "Durability(2)"},
		{OldestFirst, "oldest_first"}, {NewestFirst, "newest_first"}, {Order(7), "Order(7)"},
		{DropOldest, "drop_oldest"}, {RejectNew, "reject_new"}, {WhenFull(255), "WhenFull(255)"},
	} {
		if got := tc.v.String(); got != tc.want {
			t.Errorf("%T %d: String() = %q, want %q", tc.v, tc.v, got, tc.want)
		}
	}
	var d Durability
	var o Order
	var w WhenFull
	if err := d.UnmarshalText([]byte("interval")); err != nil || d != Interval {
		t.Errorf("durability interval: %v %v", d, err)
	}
	if err := o.UnmarshalText([]byte("newest_first")); err != nil || o != NewestFirst {
		t.Errorf("order newest_first: %v %v", o, err)
	}
	if err := w.UnmarshalText([]byte("reject_new")); err != nil || w != RejectNew {
		t.Errorf("when_full reject_new: %v %v", w, err)
	}
	if err := w.UnmarshalText([]byte("WhenFull(2)")); err == nil || err.Error() != `must be drop_oldest or reject_new, got "WhenFull(2)"` {
		t.Errorf("when_full WhenFull(2): %v", err)
	}
}
