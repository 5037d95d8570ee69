package sensors_test

import (
	"context"
	"flag"
	"fmt"
	"math"
	"path/filepath"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"
	_ "time/tzdata"

	firmwareprofiles "fieldlink/firmware-profiles"
	"fieldlink/internal/testtool"
	"fieldlink/internal/testtool/emutest"
	"fieldlink/packet"
	"fieldlink/sensors"
	"fieldlink/sensors/emulator"
	"fieldlink/sensors/modbus"
	"fieldlink/sensors/plan"
	"fieldlink/sensors/profile"
)

var update = flag.Bool("update", false, "rewrite the golden files")

// fixed is the emulators' clock in these tests: a summer afternoon.
var fixed = time.Date(2026, 7, 15, 7, 30, 0, 0, time.UTC)

func embedded(t testing.TB) profile.Set {
	t.Helper()
	set, err := profile.Load(firmwareprofiles.FS, "")
	if err != nil {
		t.Fatal(err)
	}
	return set
}

// modbusProfiles returns every embedded Modbus profile, as emulated devices
// with slave ids 1, 2, ... in name order, and matching DeviceSpecs.
func modbusProfiles(t testing.TB) ([]emulator.Device, []sensors.DeviceSpec) {
	set := embedded(t)
	var devs []emulator.Device
	var specs []sensors.DeviceSpec
	for _, name := range set.Names() {
		p := set[name]
		if p.IsLine() {
			continue
		}
		slave := byte(len(devs) + 1)
		devs = append(devs, emulator.Device{Slave: slave, Profile: p})
		specs = append(specs, sensors.DeviceSpec{Name: name, Slave: slave, Profile: p, Interval: time.Second, DataType: p.DataType})
	}
	return devs, specs
}

func open(t testing.TB, url string, timeout time.Duration) *modbus.Client {
	t.Helper()
	c, err := modbus.Open(url, modbus.Options{Timeout: timeout})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = c.Close() })
	return c
}

// checkAgainstTruth compares every field of p with what the emulator served.
func checkAgainstTruth(t *testing.T, p *packet.Packet, prof *profile.Profile, truth map[string]float64) {
	t.Helper()
	if len(p.Fields) != len(prof.Registers) {
		t.Fatalf("%s: %d fields, profile has %d registers", p.DeviceID, len(p.Fields), len(prof.Registers))
	}
	for i, f := range p.Fields {
		r := &prof.Registers[i]
		if f.Name != r.Name {
			t.Fatalf("%s: field %d is %q, want %q (profile order)", p.DeviceID, i, f.Name, r.Name)
		}
		want, ok := truth[r.Name]
		if !ok {
			continue // strings
		}
		got, isNum := f.Value.Float64()
		if f.Value.Kind() == packet.KindBool {
			got, isNum = 0, true
			if f.Value.String() == "True" {
				got = 1
			}
		}
		if !isNum || math.Abs(got-want) > 1e-9*math.Max(1, math.Abs(want)) {
			t.Errorf("%s.%s = %v, emulator served %v", p.DeviceID, r.Name, f.Value, want)
		}
		if r.Alarm != nil && r.Alarm.Fires(want) != contains(p.AlarmFields, r.Name) {
			t.Errorf("%s.%s = %v: alarm marking %v, thresholds say %v", p.DeviceID, r.Name, want, p.AlarmFields, r.Alarm.Fires(want))
		}
	}
}

func contains(s []string, v string) bool {
	for _, x := range s {
		if x == v {
			return true
		}
	}
	return false
}

// Every embedded profile, served by the emulator over Modbus TCP and over
// RTU framing, reads back exactly what was served, and its packet matches
// the golden file.
func TestEveryProfileAgainstTheEmulator(t *testing.T) {
	devs, specs := modbusProfiles(t)
	emu, err := emulator.New(devs, emulator.Options{Now: func() time.Time { return fixed }, Seed: 7})
	if err != nil {
		t.Fatal(err)
	}
	for _, tc := range []struct {
		name string
		url  string
		cost plan.Cost
	}{
		{"tcp", "tcp://" + testtool.ServeLoopback(t, emu.ServeTCP), plan.Cost{CharTime: 100 * time.Nanosecond, Turnaround: time.Millisecond}},
		{"rtuovertcp", "rtuovertcp://" + testtool.ServeLoopback(t, emu.ServeRTUOverTCP), plan.Serial(9600, 10, 10*time.Millisecond)},
	} {
		t.Run(tc.name, func(t *testing.T) {
			bus, err := sensors.NewBus(tc.name, open(t, tc.url, time.Second), specs, sensors.BusOptions{Cost: tc.cost, MaxGap: -1})
			if err != nil {
				t.Fatal(err)
			}
			n := 0
			bus.PollAll(context.Background(), func(p *packet.Packet, err error) {
				if err != nil {
					t.Error(err)
					return
				}
				spec := specs[n]
				n++
				checkAgainstTruth(t, p, spec.Profile, emu.Values(spec.Slave, fixed))
				if tc.name == "tcp" {
					golden(t, spec.Name, p)
				}
			})
			if n != len(specs) {
				t.Fatalf("%d packets for %d devices", n, len(specs))
			}
			for _, st := range bus.Status() {
				if st.Health != sensors.OK || st.Requests == 0 {
					t.Errorf("%s: health %v after %d requests", st.Name, st.Health, st.Requests)
				}
			}
		})
	}
}

// golden compares a packet, stamped with fixed site fields, to
// testdata/<profile>.golden.
func golden(t *testing.T, name string, p *packet.Packet) {
	t.Helper()
	p.At = fixed
	loc, _ := time.LoadLocation("Asia/Shanghai")
	(&packet.Stamper{IDField: "FarmId", SiteID: "001", GatewayID: "gw-01", Loc: loc}).Stamp(p)
	testtool.Golden(t, filepath.Join("testdata", name+".golden"), append(p.AppendJSON(nil, packet.Strings), '\n'), *update)
}

// A dead device is backed off and marked offline, and does not stop its bus
// neighbours from being polled on schedule.
func TestDeadDeviceDoesNotStarveTheBus(t *testing.T) {
	set := embedded(t)
	wind, gas := set["generic-wind-speed"], set["generic-mine-methane"]
	emu, err := emulator.New([]emulator.Device{
		{Slave: 1, Profile: wind},
		{Slave: 2, Profile: gas, Faults: emulator.Faults{Drop: 1}},
	}, emulator.Options{Seed: 1})
	if err != nil {
		t.Fatal(err)
	}
	client := open(t, "rtuovertcp://"+testtool.ServeLoopback(t, emu.ServeRTUOverTCP), 50*time.Millisecond)
	specs := []sensors.DeviceSpec{
		{Name: "wind", Slave: 1, Profile: wind, Interval: 20 * time.Millisecond},
		{Name: "dead", Slave: 2, Profile: gas, Interval: 20 * time.Millisecond},
	}
	bus, err := sensors.NewBus("b", client, specs, sensors.BusOptions{Backoff: 200 * time.Millisecond, MaxGap: -1})
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	var mu sync.Mutex
	got := map[string]int{}
	done := make(chan struct{})
	go func() {
		defer close(done)
		bus.Run(ctx, func(p *packet.Packet) {
			mu.Lock()
			got[p.DeviceID]++
			mu.Unlock()
		})
	}()
	testtool.WaitFor(t, 10*time.Second, "the live device to be polled 20 times", func() bool {
		mu.Lock()
		defer mu.Unlock()
		return got["wind"] >= 20
	})
	cancel()
	<-done
	st := bus.Status()
	if st[1].Health != sensors.Offline || !strings.Contains(st[1].LastError, "dead") || !strings.Contains(st[1].LastError, "slave 2") {
		t.Fatalf("dead device: %+v", st[1])
	}
	if got["dead"] != 0 || st[0].Health != sensors.OK {
		t.Fatalf("packets %v, live device %+v", got, st[0])
	}
	// Backed off: far fewer attempts on the dead device than on the live one.
	if st[1].Polls*3 > st[0].Polls {
		t.Fatalf("dead device polled %d times vs live %d: not backed off", st[1].Polls, st[0].Polls)
	}
}

// slowReader answers after a delay; a unit-level stand-in for a slow bus.
type slowReader struct{ delay time.Duration }

func (s slowReader) Read(ctx context.Context, slave, fc byte, addr, qty uint16) ([]byte, error) {
	select {
	case <-time.After(s.delay):
	case <-ctx.Done():
		return nil, ctx.Err()
	}
	return make([]byte, 2*int(qty)), nil
}

// Polls that take longer than the interval count overruns and do not queue
// up a burst of catch-up polls.
func TestOverrunsAreCountedNotAccumulated(t *testing.T) {
	p := embedded(t)["generic-wind-speed"]
	bus, err := sensors.NewBus("slow", slowReader{25 * time.Millisecond}, []sensors.DeviceSpec{
		{Name: "w", Slave: 1, Profile: p, Interval: 10 * time.Millisecond},
	}, sensors.BusOptions{MaxGap: -1})
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	n := 0
	done := make(chan struct{})
	go func() {
		defer close(done)
		bus.Run(ctx, func(*packet.Packet) {
			n++
			if n == 10 {
				cancel()
			}
		})
	}()
	<-done
	st := bus.Status()[0]
	// Each 25 ms poll spans two or three 10 ms slots: at least one slot is
	// skipped per poll.
	if st.Overruns < 9 {
		t.Fatalf("overruns = %d after %d polls of 25ms at a 10ms interval", st.Overruns, st.Polls)
	}
}

// The bus over a real serial line: the emulator on one end of a socat pty
// pair at 9600 8E1 with wire timing, the gateway's RTU client on the other.
func TestBusOverPtyRTU(t *testing.T) {
	devs, specs := modbusProfiles(t)
	devs, specs = devs[:4], specs[:4]
	emu, err := emulator.New(devs, emulator.Options{Now: func() time.Time { return fixed }, Seed: 3})
	if err != nil {
		t.Fatal(err)
	}
	b := emutest.ServePty(t, emu, 9600, 'E')
	client := open(t, fmt.Sprintf("rtu://%s?baud=9600&parity=E", b), time.Second)
	bus, err := sensors.NewBus("pty", client, specs, sensors.BusOptions{Cost: plan.Serial(9600, 11, 0), MaxGap: -1})
	if err != nil {
		t.Fatal(err)
	}
	n := 0
	bus.PollAll(context.Background(), func(p *packet.Packet, err error) {
		if err != nil {
			t.Fatal(err)
		}
		checkAgainstTruth(t, p, specs[n].Profile, emu.Values(specs[n].Slave, fixed))
		n++
	})
	if n != len(specs) {
		t.Fatalf("%d packets", n)
	}
}

// Devices on the same interval are polled back to back from the same
// instant, and every packet but the cycle's last says More, so that the
// buffer can store the cycle in one commit.
func TestCycleIsPhasedAndMarked(t *testing.T) {
	p := embedded(t)["generic-wind-speed"]
	var specs []sensors.DeviceSpec
	for i := 1; i <= 4; i++ {
		specs = append(specs, sensors.DeviceSpec{Name: fmt.Sprint("w", i), Slave: byte(i), Profile: p, Interval: time.Hour})
	}
	bus, err := sensors.NewBus("b", slowReader{}, specs, sensors.BusOptions{MaxGap: -1})
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	var got []string
	done := make(chan struct{})
	go func() {
		defer close(done)
		bus.Run(ctx, func(p *packet.Packet) {
			got = append(got, fmt.Sprintf("%s more=%t", p.DeviceID, p.More))
			if len(got) == len(specs) {
				cancel()
			}
		})
	}()
	<-done
	want := []string{"w1 more=true", "w2 more=true", "w3 more=true", "w4 more=false"}
	if !slices.Equal(got, want) {
		t.Fatalf("first cycle %v, want %v", got, want)
	}
}

// cutLine is a line whose every device fails until up, recording which
// slave each request was for and whether it was answered.
type cutLine struct {
	mu   sync.Mutex
	up   bool
	fail map[byte]int // failed requests per slave
	log  []string     // "1 ok", "2 fail", ...
}

func (c *cutLine) Read(ctx context.Context, slave, fc byte, addr, qty uint16) ([]byte, error) {
	c.mu.Lock()
	defer c.mu.Unlock()
	if !c.up {
		c.fail[slave]++
		c.log = append(c.log, fmt.Sprintf("%d fail", slave))
		return nil, modbus.ErrTimeout
	}
	c.log = append(c.log, fmt.Sprintf("%d ok", slave))
	return make([]byte, 2*int(qty)), nil
}

// When a whole line comes back after an outage (its first device answers),
// the others are retried at once, not at the end of the backoffs they grew
// during the outage.
func TestLineBackRetriesItsDevicesSoon(t *testing.T) {
	wind := embedded(t)["generic-wind-speed"]
	line := &cutLine{fail: map[byte]int{}}
	specs := []sensors.DeviceSpec{
		{Name: "fast", Slave: 1, Profile: wind, Interval: 10 * time.Millisecond},
		{Name: "slow", Slave: 2, Profile: wind, Interval: 200 * time.Millisecond},
	}
	bus, err := sensors.NewBus("b", line, specs, sensors.BusOptions{Backoff: time.Hour, MaxGap: -1})
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan struct{})
	go func() { defer close(done); bus.Run(ctx, func(*packet.Packet) {}) }()
	defer func() { cancel(); <-done }()
	// Four failures back the slow device off for 1.6 s: its next try is
	// far behind the fast device's.
	testtool.WaitFor(t, 10*time.Second, "the slow device to fail four times", func() bool {
		line.mu.Lock()
		defer line.mu.Unlock()
		if line.fail[2] >= 4 {
			line.up = true
		}
		return line.up
	})
	testtool.WaitFor(t, 20*time.Second, "both devices to answer", func() bool {
		st := bus.Status()
		return st[0].Health == sensors.OK && st[1].Health == sensors.OK
	})
	line.mu.Lock()
	defer line.mu.Unlock()
	first := slices.IndexFunc(line.log, func(s string) bool { return strings.HasSuffix(s, " ok") })
	if first+1 >= len(line.log) || line.log[first+1][0] == line.log[first][0] {
		t.Fatalf("after the line's first answer (%s) its other device was not retried next: %v", line.log[first], line.log[max(first-3, 0):min(first+4, len(line.log))])
	}
}
