package profile

import "testing"

func TestAlarmString(t *testing.T) {
	above, below := 1.5, 0.2
	for _, tc := range []struct {
		a    *Alarm
		want string
	}{
		{nil, "none"},
		{&Alarm{}, "none"},
		{&Alarm{Above: &above}, "above 1.5"},
		{&Alarm{Above: &above, Below: &below}, "above 1.5 and below 0.2"},
	} {
		if got := tc.a.String(); got != tc.want {
			t.Errorf("%q, want %q", got, tc.want)
		}
	}
}
