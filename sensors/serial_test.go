package sensors_test

import (
	"context"
	"errors"
	"fmt"
	"io"
	"os"
	"strings"
	"sync"
	"testing"
	"time"

	"fieldlink/internal/testtool"
	"fieldlink/packet"
	"fieldlink/sensors"
	"fieldlink/sensors/lineproto"
)

// A WindSonic printing NMEA sentences on one end of a pty pair, read by the
// serial sensor through a real serial port on the other.
func TestSerialSensorOverPty(t *testing.T) {
	a, b := testtool.PtyPair(t)
	prof := embedded(t)["gill-windsonic-nmea"]
	w, err := os.OpenFile(a, os.O_WRONLY, 0)
	if err != nil {
		t.Fatal(err)
	}
	defer w.Close()
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	go func() {
		good := lineproto.Emit(prof.Line, map[string]float64{"WindDirection": 120, "WindSpeed": 2.1, "WindValid": 1})
		lines := []string{
			"$WIXDR,C,022.0,C,,*52",      // another sentence: ignored
			"$WIMWV,120,R,002.10,M,A*00", // bad checksum: reported, skipped
			strings.Repeat("x", 2000),    // noise without an end: bounded
			good,
		}
		for i := 0; ctx.Err() == nil; i++ {
			if _, err := io.WriteString(w, lines[i%len(lines)]+"\r\n"); err != nil {
				return
			}
			time.Sleep(5 * time.Millisecond)
		}
	}()
	l := sensors.NewSerialSensor(sensors.SerialSpec{
		Name: "sonic-1", Profile: prof, DataType: "Wind",
		Open: sensors.SerialOpener(b, 4800, 'N', 8, 1),
	}, nil)
	p, err := l.ReadOne(ctx)
	if err != nil {
		t.Fatal(err)
	}
	got := string(p.AppendJSON(nil, packet.Strings))
	if !strings.Contains(got, `"DataBody":{"WindDirection":"120","WindSpeed":"2.10","WindValid":"True"}`) || p.DeviceID != "sonic-1" {
		t.Fatalf("packet %s", got)
	}

	// Run: packets keep coming, and the bad lines are counted as errors.
	runCtx, stop := context.WithCancel(ctx)
	n := 0
	done := make(chan struct{})
	go func() {
		defer close(done)
		l.Run(runCtx, func(*packet.Packet) {
			n++
			if n == 3 {
				stop()
			}
		})
	}()
	<-done
	st := l.Status()
	if n != 3 || st.Errors == 0 || st.Health == sensors.Unknown {
		t.Fatalf("packets %d, status %+v", n, st)
	}
}

// A port that cannot be opened is a clear error naming the sensor and port.
func TestSerialSensorMissingPort(t *testing.T) {
	l := sensors.NewSerialSensor(sensors.SerialSpec{
		Name: "ws-9", Profile: embedded(t)["gill-windsonic-nmea"],
		Open: sensors.SerialOpener("/dev/does-not-exist-fieldlink", 4800, 'N', 8, 1),
	}, nil)
	_, err := l.ReadOne(context.Background())
	if err == nil || !strings.Contains(err.Error(), "ws-9") || !strings.Contains(err.Error(), "/dev/does-not-exist-fieldlink") {
		t.Fatalf("got %v", err)
	}
}

// scriptedPort is a fake serial port opener: each Open takes the next step
// of the script. A step "" fails the open; any other step opens a port that
// yields that text and then fails (EOF, as a port unplugged). Past the end
// of the script every open fails.
func scriptedPort(steps ...string) func(context.Context) (io.ReadCloser, error) {
	var mu sync.Mutex
	return func(context.Context) (io.ReadCloser, error) {
		mu.Lock()
		defer mu.Unlock()
		step := ""
		if len(steps) > 0 {
			step, steps = steps[0], steps[1:]
		}
		if step == "" {
			return nil, errors.New("open /dev/ttyFAKE: no such device")
		}
		return io.NopCloser(strings.NewReader(step)), nil
	}
}

func goodSonicLine(t *testing.T) string {
	prof := embedded(t)["gill-windsonic-nmea"]
	return lineproto.Emit(prof.Line, map[string]float64{"WindDirection": 120, "WindSpeed": 2.1, "WindValid": 1}) + "\r\n"
}

// A port that fails to open is retried with a doubling delay, and the
// sensor goes offline after three failures in a row, as a Modbus device
// does; the first good reading resets both.
func TestSerialSensorBackoffResetsOnAGoodReading(t *testing.T) {
	l := sensors.NewSerialSensor(sensors.SerialSpec{
		Name: "sonic-2", Profile: embedded(t)["gill-windsonic-nmea"], DataType: "Wind",
		Open: scriptedPort("", "", "", goodSonicLine(t), ""),
	}, nil)
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	type attempt struct {
		Wait   time.Duration
		Health sensors.Health
	}
	var got []attempt
	l.SetSleep(func(ctx context.Context, d time.Duration) bool {
		got = append(got, attempt{d, l.Status().Health})
		if len(got) == 5 {
			cancel()
			return false
		}
		return ctx.Err() == nil
	})
	packets := 0
	l.Run(ctx, func(*packet.Packet) { packets++ })
	want := []attempt{
		{time.Second, sensors.Degraded},
		{2 * time.Second, sensors.Degraded},
		{4 * time.Second, sensors.Offline},
		// A good reading, then the port fails: the backoff starts again.
		{time.Second, sensors.Degraded},
		{2 * time.Second, sensors.Degraded},
	}
	if fmt.Sprint(got) != fmt.Sprint(want) {
		t.Errorf("waits and health before each reopen:\n got %v\nwant %v", got, want)
	}
	if packets != 1 {
		t.Errorf("%d packets, want 1", packets)
	}
	if st := l.Status(); st.LastOK.IsZero() || st.Errors != 5 || !strings.Contains(st.LastError, "sonic-2") {
		t.Errorf("status %+v", st)
	}
}

// failingReader fails the reads whose number (from 0) is in fail.
type failingReader struct {
	n    int
	fail map[int]bool
}

func (r *failingReader) Read(_ context.Context, _, _ byte, _, qty uint16) ([]byte, error) {
	defer func() { r.n++ }()
	if r.fail[r.n] {
		return nil, errors.New("timeout")
	}
	return make([]byte, 2*int(qty)), nil
}

// A serial sensor's health follows the same failures as a Modbus device's:
// degraded, offline after three failures in a row, OK on the first success.
func TestSerialSensorHealthMatchesBusDevice(t *testing.T) {
	outcomes := []bool{false, false, false, false, true, false, true}
	var steps []string
	fail := map[int]bool{}
	for i, ok := range outcomes {
		if ok {
			steps = append(steps, goodSonicLine(t))
		} else {
			steps = append(steps, "")
			fail[i] = true
		}
	}
	wind := embedded(t)["generic-wind-speed"]
	if len(wind.Registers) == 0 {
		t.Fatal("no registers")
	}
	bus, err := sensors.NewBus("b", &failingReader{fail: fail}, []sensors.DeviceSpec{
		{Name: "w", Slave: 1, Profile: wind, Interval: time.Second},
	}, sensors.BusOptions{MaxGap: -1})
	if err != nil {
		t.Fatal(err)
	}
	if n := len(bus.Requests()["w"]); n != 1 {
		t.Fatalf("the device takes %d requests a poll; the test needs 1", n)
	}
	l := sensors.NewSerialSensor(sensors.SerialSpec{
		Name: "sonic-3", Profile: embedded(t)["gill-windsonic-nmea"], Open: scriptedPort(steps...),
	}, nil)
	var busHealth, lineHealth []sensors.Health
	var busFails, lineFails []int
	for range outcomes {
		bus.PollAll(context.Background(), func(*packet.Packet, error) {})
		busHealth = append(busHealth, bus.Status()[0].Health)
		busFails = append(busFails, bus.Status()[0].ConsecutiveFailures)
		_, _ = l.ReadOne(context.Background())
		lineHealth = append(lineHealth, l.Status().Health)
		lineFails = append(lineFails, l.Status().ConsecutiveFailures)
	}
	want := []sensors.Health{sensors.Degraded, sensors.Degraded, sensors.Offline, sensors.Offline, sensors.OK, sensors.Degraded, sensors.OK}
	if fmt.Sprint(busHealth) != fmt.Sprint(want) {
		t.Errorf("bus device health %v, want %v", busHealth, want)
	}
	if fmt.Sprint(lineHealth) != fmt.Sprint(want) {
		t.Errorf("serial sensor health %v, want %v", lineHealth, want)
	}
	wantFails := []int{1, 2, 3, 4, 0, 1, 0}
	if fmt.Sprint(busFails) != fmt.Sprint(wantFails) || fmt.Sprint(lineFails) != fmt.Sprint(wantFails) {
		t.Errorf("failures in a row: bus device %v, serial sensor %v, want %v", busFails, lineFails, wantFails)
	}
}
