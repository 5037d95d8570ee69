package sensors_test

import (
	"context"
	"fmt"
	"sync"
	"testing"
	"time"

	"fieldlink/internal/testtool"
	"fieldlink/internal/testtool/emutest"
	"fieldlink/packet"
	"fieldlink/sensors"
	"fieldlink/sensors/emulator"
	"fieldlink/sensors/modbus"
	"fieldlink/sensors/plan"
)

// On an RS-485 line, writes while four devices are polled: socat records
// the line, and on it no frame ever overlaps another (every request is one
// whole frame, answered before the next goes out) and every gap before a
// request is at least 3.5 characters.
func TestWritesKeepTheLine(t *testing.T) {
	const baud = 9600
	set := embedded(t)
	names := []string{"generic-irrigation-valve", "renke-rs-ws-n01", "generic-wind-speed", "generic-mine-methane"}
	var devs []emulator.Device
	var specs []sensors.DeviceSpec
	for i, n := range names {
		devs = append(devs, emulator.Device{Slave: byte(i + 1), Profile: set[n], Faults: emulator.Faults{Turnaround: 2 * time.Millisecond}})
		specs = append(specs, sensors.DeviceSpec{Name: n, Slave: byte(i + 1), Profile: set[n], Interval: 150 * time.Millisecond, DataType: set[n].DataType})
	}
	emu, err := emulator.New(devs, emulator.Options{Seed: 5})
	if err != nil {
		t.Fatal(err)
	}
	a, b, line := testtool.PtyPairLogged(t)
	emutest.ServeLine(t, emu, a, baud, 'N')
	c := open(t, fmt.Sprintf("rtu://%s?baud=%d", b, baud), 500*time.Millisecond)
	bus, err := sensors.NewBus("line", c, specs, sensors.BusOptions{Cost: plan.Serial(baud, 11, 2*time.Millisecond)})
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	var wg sync.WaitGroup
	var polls int
	wg.Go(func() { bus.Run(ctx, func(*packet.Packet) { polls++ }) })
	const writes = 12
	for i := range writes {
		point, v := "Setpoint", float64(10+i)
		if i%3 == 0 {
			point, v = "ValveOpen", float64(i/3%2)
		}
		res, err := bus.Write(context.Background(), names[0], point, v)
		if err != nil || res.Err != nil || res.ReadErr != nil {
			t.Fatalf("write %d: %v %+v", i, err, res)
		}
		time.Sleep(time.Duration(20+i*7%40) * time.Millisecond)
	}
	cancel()
	wg.Wait()
	time.Sleep(50 * time.Millisecond) // socat's last lines

	chunks, err := parseSocatLog(line.String())
	if err != nil {
		t.Fatal(err)
	}
	// Reassemble frames: bytes of one direction that follow each other
	// belong together until the other side speaks.
	type frame struct {
		req  bool
		at   time.Time
		data []byte
	}
	var frames []frame
	for _, ch := range chunks {
		req := !ch.fromA // the master is on the b side
		if n := len(frames); n > 0 && frames[n-1].req == req {
			frames[n-1].data = append(frames[n-1].data, ch.data...)
			continue
		}
		frames = append(frames, frame{req: req, at: ch.at, data: ch.data})
	}
	t3_5 := modbus.Silence(baud)
	var written, reqs int
	minGap := time.Hour
	for i, f := range frames {
		want := rtuReplyLen(f.data)
		if f.req {
			want = rtuRequestLen(f.data)
		}
		if want == 0 || len(f.data) != want || !crcOK(f.data) {
			t.Fatalf("frame %d (request %v) is not one whole RTU frame: % x (two frames overlap, or one was cut)", i, f.req, f.data)
		}
		if !f.req {
			continue
		}
		reqs++
		if fc := f.data[1]; fc == 5 || fc == 6 || fc == 15 || fc == 16 {
			written++
		}
		if i+1 < len(frames) && frames[i+1].req {
			t.Errorf("request %d (% x) was not answered before the next request", i, f.data)
		}
		if i == 0 {
			continue
		}
		gap := f.at.Sub(frames[i-1].at)
		minGap = min(minGap, gap)
		if gap < t3_5 {
			t.Errorf("request %d (% x) went out %v after the previous frame, under t3.5 = %v", i, f.data, gap, t3_5)
		}
	}
	if written != writes || reqs < writes+3*len(names) {
		t.Errorf("the line carried %d writes and %d requests in all; want %d writes among the polls of %d devices", written, reqs, writes, len(names))
	}
	t.Logf("%d frames recorded, %d requests, %d writes, %d packets polled; shortest gap before a request %v (t3.5 %v)", len(frames), reqs, written, polls, minGap, t3_5)
}
