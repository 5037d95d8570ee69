package sensors_test

import (
	"context"
	"encoding/hex"
	"errors"
	"sync/atomic"
	"testing"
	"time"

	"fieldlink/internal/testtool"
	"fieldlink/packet"
	"fieldlink/sensors"
	"fieldlink/sensors/emulator"
	"fieldlink/sensors/plan"
)

// switchable fails every read while down is set, as a device unplugged.
type switchable struct {
	r    sensors.Reader
	down atomic.Bool
}

func (s *switchable) Read(ctx context.Context, slave, fc byte, addr, qty uint16) ([]byte, error) {
	if s.down.Load() {
		return nil, errors.New("unplugged")
	}
	return s.r.Read(ctx, slave, fc, addr, qty)
}

// A point shows what its device last read, with the wire bytes it came
// from; when the device stops answering its points turn stale and then,
// once the device is offline, bad, keeping the last value only beside that
// quality; they are good again on the first answer.
func TestReadingsFollowTheirDevice(t *testing.T) {
	set := embedded(t)
	prof := set["renke-rs-ws-n01"]
	emu, err := emulator.New([]emulator.Device{{Slave: 1, Profile: prof}}, emulator.Options{Now: func() time.Time { return fixed }, Seed: 3})
	if err != nil {
		t.Fatal(err)
	}
	c := open(t, "tcp://"+testtool.ServeLoopback(t, emu.ServeTCP), time.Second)
	r := &switchable{r: c}
	spec := sensors.DeviceSpec{Name: "th-1", Slave: 1, Profile: prof, Interval: time.Second, DataType: prof.DataType}
	bus, err := sensors.NewBus("line", r, []sensors.DeviceSpec{spec}, sensors.BusOptions{Cost: plan.Cost{CharTime: time.Microsecond}})
	if err != nil {
		t.Fatal(err)
	}
	now := time.Now()
	for _, p := range bus.Readings(now) {
		if p.Quality != sensors.Bad || !p.At.IsZero() || p.Value != (packet.Value{}) {
			t.Fatalf("before any poll: %+v, want bad with no value", p)
		}
	}
	poll := func() (got *packet.Packet) {
		bus.PollAll(context.Background(), func(p *packet.Packet, _ error) { got = p })
		return got
	}
	p := poll()
	if p == nil {
		t.Fatal("the first poll failed")
	}
	truth := emu.Values(1, fixed)
	points := bus.Readings(time.Now())
	if len(points) != len(prof.Registers) {
		t.Fatalf("%d points, profile has %d registers", len(points), len(prof.Registers))
	}
	for i, pt := range points {
		reg := &prof.Registers[i]
		if pt.Quality != sensors.Good || pt.Name != reg.Name || pt.Unit != reg.Unit {
			t.Errorf("point %d: %+v, want good %s in %s", i, pt, reg.Name, reg.Unit)
		}
		if pt.Value != p.Fields[i].Value {
			t.Errorf("%s: value %v, the packet says %v", pt.Name, pt.Value, p.Fields[i].Value)
		}
		if len(pt.Raw) != 2*reg.Words() {
			t.Fatalf("%s: raw %x, want %d bytes", pt.Name, pt.Raw, 2*reg.Words())
		}
		want := make([]byte, 2*reg.Words())
		reg.Encode(want, truth[reg.Name])
		if hex.EncodeToString(pt.Raw) != hex.EncodeToString(want) {
			t.Errorf("%s: raw %x, the emulator served %x", pt.Name, pt.Raw, want)
		}
	}

	r.down.Store(true)
	poll()
	if pt, _ := bus.Latest("th-1", prof.Registers[0].Name, time.Now()); pt.Quality != sensors.Stale || pt.Value != p.Fields[0].Value {
		t.Errorf("one failed poll: %+v, want stale with the last value", pt)
	}
	poll()
	poll()
	if pt, _ := bus.Latest("th-1", prof.Registers[0].Name, time.Now()); pt.Quality != sensors.Bad {
		t.Errorf("offline device: %+v, want bad", pt)
	}
	r.down.Store(false)
	poll()
	if pt, _ := bus.Latest("th-1", prof.Registers[0].Name, time.Now()); pt.Quality != sensors.Good {
		t.Errorf("answering again: %+v, want good", pt)
	}
	if pt, _ := bus.Latest("th-1", prof.Registers[0].Name, time.Now().Add(3*time.Second)); pt.Quality != sensors.Stale {
		t.Errorf("three intervals later: %+v, want stale", pt)
	}
	if _, ok := bus.Latest("th-1", "NoSuchPoint", time.Now()); ok {
		t.Error("Latest found a point the profile does not have")
	}
}
