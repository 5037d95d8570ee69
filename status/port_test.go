package status

import (
	"encoding/json"
	"strings"
	"syscall"
	"testing"
	"time"

	"fieldlink/internal/testtool"
	"fieldlink/sensors"
)

// busA is bus a of the page's JSON.
func busA(t *testing.T, js string) Bus {
	t.Helper()
	testtool.ValidStatus(t, []byte(js))
	var snap Snapshot
	if err := json.Unmarshal([]byte(js), &snap); err != nil {
		t.Fatal(err)
	}
	for _, b := range snap.Buses {
		if b.Name == "a" {
			return b
		}
	}
	t.Fatal("no bus a")
	return Bus{}
}

// A bus whose serial port went away while running: down since the port
// went, because of the port's kind, in words; the error's text is not read.
func TestBusPortGoneSaysWhy(t *testing.T) {
	f := newFake()
	since := t0.Add(-90 * time.Second)
	gone := "device ch4-1 (slave 1 on bus a): read holding 0+1: modbus: open serial port /dev/ttyUSB0 at 4800 8N1: no such file or directory"
	port := sensors.PortState{Since: since, Err: &sensors.PortError{Port: "/dev/ttyUSB0", Kind: sensors.PortMissing, Err: syscall.ENOENT}}
	f.devs = []sensors.DeviceStatus{
		{Name: "ch4-1", Bus: "a", Health: sensors.Offline, Polls: 10, Errors: 7, ConsecutiveFailures: 7, LastError: gone, Port: port},
		{Name: "co-1", Bus: "a", Health: sensors.Offline, Polls: 10, Errors: 7, ConsecutiveFailures: 7, LastError: gone, Port: port},
	}
	f.readings = f.readings[:2]
	html, js := page(t, f, t0)
	b := busA(t, js)
	want := "port /dev/ttyUSB0 missing: is the adapter plugged in?"
	if b.State != "down" || str(b.Cause) != want || b.DownSince == nil || !b.DownSince.Equal(since) {
		t.Errorf("bus a: state %s, cause %q, down since %v; want down, %q, %v", b.State, str(b.Cause), b.DownSince, want, since)
	}
	if !strings.Contains(html, `down since <time datetime="2026-11-30T07:58:30Z">07:58:30 UTC</time> (1 min 30 s) because `+want) {
		t.Errorf("the page does not say since when and why the bus is down:\n%s", html)
	}
	if n := strings.Count(html, "missing: is the adapter plugged in?"); n != 1 {
		t.Errorf("the cause shows %d times, want once (at the bus)", n)
	}
}

// A bus whose port has not opened since the start: down (not starting),
// with its cause, and its devices not polled yet because of it.
func TestBusPortMissingAtStartIsDown(t *testing.T) {
	for _, c := range []struct {
		kind sensors.PortKind
		err  syscall.Errno
		want string
	}{
		{sensors.PortMissing, syscall.ENOENT, "port /dev/ttyUSB0 missing: is the adapter plugged in?"},
		{sensors.PortForbidden, syscall.EACCES, "port /dev/ttyUSB0: permission denied: is the service's user in the dialout group?"},
		{sensors.PortBusy, syscall.EBUSY, "port /dev/ttyUSB0 busy: another program holds it"},
	} {
		f := newFake()
		port := sensors.PortState{Since: t0.Add(-time.Minute), Err: &sensors.PortError{Port: "/dev/ttyUSB0", Kind: c.kind, Err: c.err}}
		f.devs = []sensors.DeviceStatus{
			{Name: "ch4-1", Bus: "a", Health: sensors.Unknown, Port: port},
			{Name: "co-1", Bus: "a", Health: sensors.Unknown, Port: port},
		}
		f.readings = f.readings[:2]
		_, js := page(t, f, t0)
		b := busA(t, js)
		if b.State != "down" || str(b.Cause) != c.want || b.DownSince == nil {
			t.Errorf("%v: bus a: state %s, cause %q, down since %v", c.kind, b.State, str(b.Cause), b.DownSince)
		}
		var snap Snapshot
		if err := json.Unmarshal([]byte(js), &snap); err != nil {
			t.Fatal(err)
		}
		for _, d := range snap.Devices {
			if d.Bus == "a" && str(d.Why) != "not polled yet: the bus is down (above)" {
				t.Errorf("%v: device %s: why %q", c.kind, d.Name, str(d.Why))
			}
		}
	}
}
