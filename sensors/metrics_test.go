package sensors

import "testing"

func TestDevicesAnswering(t *testing.T) {
	st := func(hs ...Health) []DeviceStatus {
		out := make([]DeviceStatus, len(hs))
		for i, h := range hs {
			out[i] = DeviceStatus{Name: string(rune('a' + i)), Health: h}
		}
		return out
	}
	for _, tc := range []struct {
		name string
		devs []DeviceStatus
		ok   bool
		why  string
	}{
		{"none", nil, false, "no devices configured"},
		{"not polled", st(Unknown, Unknown), false, "no device answering (2 devices: 2 not polled yet)"},
		{"all failing", st(Offline, Degraded, Offline, Unknown), false,
			"no device answering (4 devices: 1 not polled yet, 1 degraded, 2 offline)"},
		{"one ok", st(Offline, OK), true, ""},
	} {
		t.Run(tc.name, func(t *testing.T) {
			ok, why := DevicesAnswering(tc.devs)
			if ok != tc.ok || why != tc.why {
				t.Errorf("DevicesAnswering = %v, %q; want %v, %q", ok, why, tc.ok, tc.why)
			}
		})
	}
}
