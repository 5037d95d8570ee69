package config

import (
	"testing"
	"time"
)

func TestExceptionString(t *testing.T) {
	one, ten := 0.5, 10.0
	for _, tc := range []struct {
		e    Exception
		want string
	}{
		{Exception{}, "any change"},
		{Exception{Deadband: &one, Heartbeat: 5 * time.Minute}, "deadband 0.5, heartbeat 5m0s"},
		{Exception{DeadbandPercent: &ten}, "deadband 10%"},
		{Exception{Heartbeat: time.Hour}, "heartbeat 1h0m0s"},
	} {
		if got := tc.e.String(); got != tc.want {
			t.Errorf("%#v: %q, want %q", tc.e, got, tc.want)
		}
	}
}
