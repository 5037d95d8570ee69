package words

import "testing"

func TestCount(t *testing.T) {
	for _, tc := range []struct {
		got, want string
	}{
		{Count(1, "poll"), "1 poll"},
		{Count(0, "poll"), "0 polls"},
		{Count(uint64(3), "register"), "3 registers"},
		{Count(2, "bus"), "2 buses"},
		{Count(int64(1), "bus"), "1 bus"},
	} {
		if tc.got != tc.want {
			t.Errorf("got %q, want %q", tc.got, tc.want)
		}
	}
}
