package config

import (
	"testing"
	"time"
)

func TestReportByExceptionString(t *testing.T) {
	one, ten := 0.5, 10.0
	for _, tc := range []struct {
		e    ReportByException
		want string
	}{
		{ReportByException{}, "any change"},
		{ReportByException{Deadband: &one, Heartbeat: 5 * time.Minute}, "deadband 0.5, heartbeat 5m0s"},
		{ReportByException{DeadbandPercent: &ten}, "deadband 10%"},
		{ReportByException{Heartbeat: time.Hour}, "heartbeat 1h0m0s"},
	} {
		if got := tc.e.String(); got != tc.want {
			t.Errorf("%#v: %q, want %q", tc.e, got, tc.want)
		}
	}
}
