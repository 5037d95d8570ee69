package sensors_test

import (
	"context"
	"io"
	"os"
	"strings"
	"testing"
	"time"

	"fieldlink/internal/testtool"
	"fieldlink/packet"
	"fieldlink/sensors"
	"fieldlink/sensors/lineproto"
)

// A WindSonic printing NMEA sentences on one end of a pty pair, read by the
// line sensor through a real serial port on the other.
func TestLineSensorOverPty(t *testing.T) {
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
	l := sensors.NewLineSensor(sensors.LineSpec{
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
func TestLineSensorMissingPort(t *testing.T) {
	l := sensors.NewLineSensor(sensors.LineSpec{
		Name: "ws-9", Profile: embedded(t)["gill-windsonic-nmea"],
		Open: sensors.SerialOpener("/dev/does-not-exist-fieldlink", 4800, 'N', 8, 1),
	}, nil)
	_, err := l.ReadOne(context.Background())
	if err == nil || !strings.Contains(err.Error(), "ws-9") || !strings.Contains(err.Error(), "/dev/does-not-exist-fieldlink") {
		t.Fatalf("got %v", err)
	}
}
