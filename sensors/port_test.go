package sensors_test

import (
	"context"
	"errors"
	"fmt"
	"io"
	"io/fs"
	"log/slog"
	"os"
	"path/filepath"
	"strings"
	"syscall"
	"testing"
	"time"

	"go.bug.st/serial"

	"fieldlink/internal/testtool"
	"fieldlink/internal/testtool/emutest"
	"fieldlink/packet"
	"fieldlink/sensors"
	"fieldlink/sensors/emulator"
	"fieldlink/sensors/lineproto"
	"fieldlink/sensors/modbus"
	"fieldlink/sensors/plan"
)

// A port's failure to open gets its kind from the system's error number
// (or the serial library's code), however it is wrapped, never from the
// text.
func TestPortErrorKinds(t *testing.T) {
	wrap := func(err error) error { return fmt.Errorf("modbus: open serial port /dev/ttyUSB0 at 9600 8N1: %w", err) }
	for _, c := range []struct {
		err  error
		want sensors.PortKind
	}{
		{wrap(syscall.ENOENT), sensors.PortMissing},
		{wrap(&fs.PathError{Op: "open", Path: "/dev/ttyUSB0", Err: syscall.ENOENT}), sensors.PortMissing},
		{wrap(syscall.ENODEV), sensors.PortMissing},
		{wrap(syscall.ENXIO), sensors.PortMissing},
		{wrap(syscall.EACCES), sensors.PortForbidden},
		{wrap(syscall.EPERM), sensors.PortForbidden},
		{wrap(syscall.EBUSY), sensors.PortBusy},
		{wrap(&serial.PortError{}), sensors.PortBusy}, // the library's EBUSY: code PortBusy
		{wrap(syscall.EIO), sensors.PortFailed},
		// The words of a kind, but not its number: no kind.
		{errors.New("open /dev/ttyUSB0: no such file or directory"), sensors.PortFailed},
	} {
		pe := sensors.PortErrorOf("/dev/ttyUSB0", c.err)
		if pe.Kind != c.want {
			t.Errorf("%v: kind %v, want %v", c.err, pe.Kind, c.want)
		}
		if !errors.Is(pe, c.err) {
			t.Errorf("%v: the port error does not wrap it", c.err)
		}
	}
	if sensors.PortErrorOf("/dev/ttyUSB0", nil) != nil {
		t.Error("no error, yet a port error")
	}
	// A real open of a path that does not exist, by both openers.
	missing := filepath.Join(t.TempDir(), "ttyUSB9")
	_, err := modbus.Open("rtu://"+missing, modbus.Options{})
	if k := sensors.PortErrorOf(missing, err).Kind; k != sensors.PortMissing {
		t.Errorf("modbus.Open of a missing port: kind %v (%v)", k, err)
	}
	_, err = sensors.SerialOpener(missing, 4800, 'N', 8, 1)(context.Background())
	if k := sensors.PortErrorOf(missing, err).Kind; k != sensors.PortMissing {
		t.Errorf("SerialOpener of a missing port: kind %v (%v)", k, err)
	}
}

// The words a technician reads for each kind.
func TestPortErrorAdvice(t *testing.T) {
	for kind, want := range map[sensors.PortKind]string{
		sensors.PortMissing:   "port /dev/ttyUSB0 missing: is the adapter plugged in?",
		sensors.PortForbidden: "port /dev/ttyUSB0: permission denied: is the service's user in the dialout group?",
		sensors.PortBusy:      "port /dev/ttyUSB0 busy: another program holds it",
		sensors.PortFailed:    "port /dev/ttyUSB0 does not open: input/output error",
	} {
		pe := &sensors.PortError{Port: "/dev/ttyUSB0", Kind: kind, Err: syscall.EIO}
		if got := pe.Advice(); got != want {
			t.Errorf("%v: %q, want %q", kind, got, want)
		}
	}
}

// A bus whose port is missing at start is down, says why, polls nothing,
// and opens the port once it appears (a symlink to a pty with the emulator
// on its other end): no restart.
func TestBusStartsDownAndOpensWhenThePortAppears(t *testing.T) {
	devs, specs := modbusProfiles(t)
	devs, specs = devs[:1], specs[:1]
	specs[0].Interval = 50 * time.Millisecond
	emu, err := emulator.New(devs, emulator.Options{Seed: 3})
	if err != nil {
		t.Fatal(err)
	}
	port := filepath.Join(t.TempDir(), "ttyUSB0")
	url := "rtu://" + port + "?baud=9600"
	_, err = modbus.Open(url, modbus.Options{})
	if err == nil {
		t.Fatal("opened a port that does not exist")
	}
	first := err
	var log testtool.SyncBuffer
	var client *modbus.Client // set by the bus's goroutine, read after Run returns
	bus, err := sensors.NewBus("field-a", nil, specs, sensors.BusOptions{
		Cost: plan.Serial(9600, 10, 0), MaxGap: -1, Port: port, Logger: slog.New(slog.NewTextHandler(&log, nil)),
		Open: func() (sensors.Reader, error) {
			if first != nil {
				err := first
				first = nil
				return nil, err
			}
			c, err := modbus.Open(url, modbus.Options{})
			if err != nil {
				return nil, err
			}
			client = c
			return c, nil
		},
	})
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	polled := make(chan *packet.Packet, 100)
	done := make(chan struct{})
	go func() {
		defer close(done)
		bus.Run(ctx, func(p *packet.Packet) {
			select {
			case polled <- p:
			default:
			}
		})
	}()
	defer func() {
		cancel()
		<-done
		if client != nil {
			_ = client.Close()
		}
	}()
	testtool.WaitFor(t, 10*time.Second, "the bus down for its missing port", func() bool {
		return bus.Port().Kind() == sensors.PortMissing
	})
	st := bus.Status()[0]
	if st.Port.Kind() != sensors.PortMissing || st.Port.Since.IsZero() || st.Polls != 0 {
		t.Fatalf("device status while the port is missing: %+v", st)
	}
	if _, err := bus.Write(ctx, specs[0].Name, "nothing", 1); !errors.Is(err, sensors.ErrNoSuchPoint) {
		t.Fatalf("write of no point: %v", err)
	}

	b := emutest.ServePty(t, emu, 9600, 'N')
	if err := os.Symlink(b, port); err != nil {
		t.Fatal(err)
	}
	select {
	case p := <-polled:
		if p.DeviceID != specs[0].Name {
			t.Fatalf("packet of %s", p.DeviceID)
		}
	case <-time.After(60 * time.Second): // a hang detector: the retry is at most 30 s away
		t.Fatalf("no packet after the port appeared; log:\n%s", log.String())
	}
	if k := bus.Port().Kind(); k != sensors.PortOK {
		t.Errorf("the bus polls but its port shows %v", k)
	}
	for _, want := range []string{"bus down: port " + port + " missing: is the adapter plugged in?", "bus up: port open"} {
		if !strings.Contains(log.String(), want) {
			t.Errorf("no log line %q:\n%s", want, log.String())
		}
	}
}

// A one-shot poll of a bus whose port is missing reports the port's error,
// with its kind, for each device.
func TestPollAllOfABusWhosePortIsMissing(t *testing.T) {
	_, specs := modbusProfiles(t)
	specs = specs[:2]
	port := filepath.Join(t.TempDir(), "ttyUSB0")
	bus, err := sensors.NewBus("field-a", nil, specs, sensors.BusOptions{
		MaxGap: -1, Port: port,
		Open: func() (sensors.Reader, error) { return modbus.Open("rtu://"+port, modbus.Options{}) },
	})
	if err != nil {
		t.Fatal(err)
	}
	n := 0
	bus.PollAll(context.Background(), func(p *packet.Packet, err error) {
		n++
		var pe *sensors.PortError
		if !errors.As(err, &pe) || pe.Kind != sensors.PortMissing || !strings.Contains(err.Error(), specs[n-1].Name) {
			t.Errorf("device %d: %v", n, err)
		}
	})
	if n != len(specs) {
		t.Errorf("%d reports for %d devices", n, len(specs))
	}
}

// A serial sensor whose port is missing at start is down and says why, and
// reads once the port appears.
func TestSerialSensorStartsDownAndReadsWhenThePortAppears(t *testing.T) {
	prof := embedded(t)["gill-windsonic-nmea"]
	port := filepath.Join(t.TempDir(), "ttyUSB1")
	var log testtool.SyncBuffer
	l := sensors.NewSerialSensor(sensors.SerialSpec{
		Name: "sonic-1", Profile: prof, DataType: "Wind", Port: port,
		Open: sensors.SerialOpener(port, 4800, 'N', 8, 1),
	}, slog.New(slog.NewTextHandler(&log, nil)))
	ctx, cancel := context.WithCancel(context.Background())
	polled := make(chan *packet.Packet, 100)
	done := make(chan struct{})
	go func() {
		defer close(done)
		l.Run(ctx, func(p *packet.Packet) {
			select {
			case polled <- p:
			default:
			}
		})
	}()
	defer func() { cancel(); <-done }()
	testtool.WaitFor(t, 10*time.Second, "the sensor down for its missing port", func() bool {
		return l.Status().Port.Kind() == sensors.PortMissing
	})
	if !strings.Contains(log.String(), "serial sensor down: port "+port+" missing: is the adapter plugged in?") {
		t.Errorf("no log line says the port is missing:\n%s", log.String())
	}

	a, b := testtool.PtyPair(t)
	w, err := os.OpenFile(a, os.O_WRONLY, 0)
	if err != nil {
		t.Fatal(err)
	}
	defer w.Close()
	go func() {
		good := lineproto.Emit(prof.Line, map[string]float64{"WindDirection": 120, "WindSpeed": 2.1, "WindValid": 1})
		for ctx.Err() == nil {
			if _, err := io.WriteString(w, good+"\r\n"); err != nil {
				return
			}
			time.Sleep(20 * time.Millisecond)
		}
	}()
	if err := os.Symlink(b, port); err != nil {
		t.Fatal(err)
	}
	select {
	case <-polled:
	case <-time.After(60 * time.Second): // a hang detector: the retry is at most 30 s away
		t.Fatalf("no reading after the port appeared; log:\n%s", log.String())
	}
	if k := l.Status().Port.Kind(); k != sensors.PortOK {
		t.Errorf("the sensor reads but its port shows %v", k)
	}
	if !strings.Contains(log.String(), "serial sensor up: port open") {
		t.Errorf("no log line says the port opened:\n%s", log.String())
	}
}
