package emulator

import (
	"encoding/binary"
	"errors"
	"fmt"
	"math"
	"net"
	"strings"
	"sync"
	"testing"
	"time"

	gm "github.com/goburrow/modbus"

	"fieldlink/internal/testtool"
	"fieldlink/sensors/profile"
)

// rtuConn is a master's RTU-over-TCP connection to an emulator.
type rtuConn struct {
	t testing.TB
	c net.Conn
}

func newRTUConn(t testing.TB, devs []Device, opt Options) (*Emulator, *rtuConn) {
	t.Helper()
	e := newEmu(t, devs, opt)
	addr := testtool.ServeLoopback(t, e.ServeRTUOverTCP)
	return e, &rtuConn{t: t, c: dial(t, addr)}
}

// ask sends req and returns the reply, or nil after wait of silence.
func (r *rtuConn) ask(req []byte, wait time.Duration) []byte {
	r.t.Helper()
	if _, err := r.c.Write(req); err != nil {
		r.t.Fatal(err)
	}
	return readRTU(r.t, r.c, r.c.SetReadDeadline, wait)
}

// read sends a read request and returns the checked reply PDU.
func (r *rtuConn) read(slave, fc byte, start, qty uint16) *gm.ProtocolDataUnit {
	r.t.Helper()
	adu := r.ask(rtuRequest(r.t, slave, fc, u16s(start, qty)...), 2*time.Second)
	if adu == nil {
		r.t.Fatalf("slave %d fc %d %d+%d: no reply", slave, fc, start, qty)
	}
	if adu[0] != slave {
		r.t.Fatalf("reply from slave %d, want %d", adu[0], slave)
	}
	return checkRTU(r.t, adu)
}

func weather(t testing.TB, slave byte, f Faults) Device {
	return Device{Slave: slave, Profile: parse(t, "weather", weatherYAML), Faults: f}
}

// TestReadsDecodeToValues reads every table over RTU-over-TCP and decodes
// the replies as a master would: they must equal what Values says.
func TestReadsDecodeToValues(t *testing.T) {
	dev := weather(t, 7, Faults{})
	e, m := newRTUConn(t, []Device{dev}, Options{Seed: 42})
	want := e.Values(7, fixedNow)
	if len(want) != 11 { // every register but the string
		t.Fatalf("Values has %d entries, want 11: %v", len(want), want)
	}

	got := map[string]float64{}
	for _, rd := range []struct {
		area       profile.Area
		start, qty uint16
	}{
		{profile.Holding, 0, 6},  // up to the hole at 6-7, across the gap at 5
		{profile.Holding, 8, 8},  // after the hole to the end of the span, margin included
		{profile.Input, 0, 16},   // the whole input span: gaps, string, margin
		{profile.Holding, 2, 2},  // WindSpeed alone
		{profile.Holding, 10, 2}, // RainTotal alone
		{profile.Input, 3, 4},    // Pressure alone
	} {
		fc := rd.area.FunctionCode()
		pdu := m.read(7, fc, rd.start, rd.qty)
		if pdu.FunctionCode != fc || int(pdu.Data[0]) != 2*int(rd.qty) || len(pdu.Data) != 1+2*int(rd.qty) {
			t.Fatalf("%v %d+%d: reply fc %d data % x", rd.area, rd.start, rd.qty, pdu.FunctionCode, pdu.Data)
		}
		for k, v := range decodeWords(dev.Profile, rd.area, int(rd.start), pdu.Data[1:]) {
			got[k] = v
		}
	}
	// Gaps read as 0.
	for _, g := range []struct {
		area  profile.Area
		start uint16
	}{{profile.Holding, 5}, {profile.Holding, 8}, {profile.Holding, 9}, {profile.Holding, 15}, {profile.Input, 1}, {profile.Input, 7}} {
		pdu := m.read(7, g.area.FunctionCode(), g.start, 1)
		if pdu.Data[1] != 0 || pdu.Data[2] != 0 {
			t.Errorf("%v %d: unmapped register reads % x, want 0", g.area, g.start, pdu.Data[1:])
		}
	}
	// The string register named Serial carries a serial number with the
	// slave id in it, truncated to its 8 bytes.
	if pdu := m.read(7, 4, 8, 4); !strings.HasPrefix(string(pdu.Data[1:]), "FL007") || len(pdu.Data) != 9 {
		t.Errorf("serial number reads %q", pdu.Data[1:])
	}
	// Bits: discrete 0 (Door) is 1, coil 5 (Relay) is 0, coil 0..4 unmapped.
	if pdu := m.read(7, 2, 0, 1); pdu.Data[0] != 1 || pdu.Data[1] != 1 {
		t.Errorf("discrete 0: % x", pdu.Data)
	}
	if pdu := m.read(7, 1, 0, 9); pdu.Data[0] != 2 || pdu.Data[1] != 0 || pdu.Data[2] != 0 {
		t.Errorf("coils 0..8: % x", pdu.Data)
	}
	got["Door"], got["Relay"] = 1, 0

	for k, v := range want {
		g, ok := got[k]
		if !ok {
			t.Errorf("%s not read", k)
			continue
		}
		if g != v && !(math.IsNaN(g) && math.IsNaN(v)) {
			t.Errorf("%s: served %v, Values says %v", k, g, v)
		}
	}
	if want["Alarm"] != 1 || want["FanOn"] != 0 {
		t.Errorf("status bits: Alarm %v FanOn %v, want 1 and 0", want["Alarm"], want["FanOn"])
	}
	if pdu := m.read(7, 3, 12, 1); binary.BigEndian.Uint16(pdu.Data[1:]) != 1<<3 {
		t.Errorf("status word % x, want 00 08", pdu.Data[1:])
	}
}

// TestExceptions: holes, reads past the span, bad quantities and unknown
// functions are answered with the exception a device gives.
func TestExceptions(t *testing.T) {
	_, m := newRTUConn(t, []Device{weather(t, 1, Faults{})}, Options{})
	for _, c := range []struct {
		name string
		req  []byte
		code byte
	}{
		{"across the hole", rtuRequest(t, 1, 3, u16s(0, 16)...), 2},
		{"into the hole", rtuRequest(t, 1, 3, u16s(7, 1)...), 2},
		{"past the span", rtuRequest(t, 1, 3, u16s(16, 1)...), 2},
		{"ending past the span", rtuRequest(t, 1, 4, u16s(10, 7)...), 2},
		{"far away", rtuRequest(t, 1, 3, u16s(40000, 2)...), 2},
		{"zero quantity", rtuRequest(t, 1, 3, u16s(0, 0)...), 3},
		{"over 125 registers", rtuRequest(t, 1, 4, u16s(0, 126)...), 3},
		{"coils past the span", rtuRequest(t, 1, 1, u16s(0, 17)...), 2},
		{"report slave id", rtuRequest(t, 1, 17), 1},
		{"diagnostics", rtuRequest(t, 1, 8, u16s(0, 0x1234)...), 1},
		{"unknown length function", rtuRequest(t, 1, 20, 7, 6, 0, 1, 0, 2, 0, 3), 1},
		{"write to the hole", rtuRequest(t, 1, 6, u16s(6, 1)...), 2},
		{"bad coil value", rtuRequest(t, 1, 5, u16s(5, 0x1234)...), 3},
		{"FC16 count mismatch", rtuRequest(t, 1, 16, append(u16s(0, 2), 2, 0, 1)...), 3},
	} {
		t.Run(c.name, func(t *testing.T) {
			adu := m.ask(c.req, 2*time.Second)
			if adu == nil {
				t.Fatal("no reply")
			}
			pdu := checkRTU(t, adu)
			if pdu.FunctionCode != c.req[1]|0x80 || len(pdu.Data) != 1 || pdu.Data[0] != c.code {
				t.Fatalf("reply fc %#x data % x, want exception %d to fc %d", pdu.FunctionCode, pdu.Data, c.code, c.req[1])
			}
		})
	}
	// A device without input registers does not have function 4.
	noInput := parse(t, "coils", "model: C\ndata_type: t\nregisters:\n  - {name: A, area: coil, address: 0}\n")
	_, m2 := newRTUConn(t, []Device{{Slave: 3, Profile: noInput}}, Options{})
	if pdu := checkRTU(t, m2.ask(rtuRequest(t, 3, 4, u16s(0, 1)...), time.Second)); pdu.FunctionCode != 0x84 || pdu.Data[0] != 1 {
		t.Errorf("fc 4 on a coil-only device: fc %#x % x, want exception 1", pdu.FunctionCode, pdu.Data)
	}
}

// TestSilence: requests for other slaves, broadcasts and frames with a bad
// CRC get no reply, and the stream goes on afterwards.
func TestSilence(t *testing.T) {
	e, m := newRTUConn(t, []Device{weather(t, 1, Faults{}), weather(t, 2, Faults{})}, Options{})
	quiet := 150 * time.Millisecond
	if adu := m.ask(rtuRequest(t, 9, 3, u16s(0, 1)...), quiet); adu != nil {
		t.Errorf("slave 9 (not emulated) answered % x", adu)
	}
	if adu := m.ask(rtuRequest(t, 0, 3, u16s(0, 1)...), quiet); adu != nil {
		t.Errorf("broadcast read answered % x", adu)
	}
	bad := rtuRequest(t, 1, 3, u16s(0, 1)...)
	bad[len(bad)-1] ^= 0x40
	if adu := m.ask(bad, quiet); adu != nil {
		t.Errorf("bad-CRC request answered % x", adu)
	}
	if adu := m.ask([]byte{0x55, 0xAA, 0x01}, quiet); adu != nil {
		t.Errorf("noise answered % x", adu)
	}
	// After the silence the framer is in step again, for both slaves.
	for _, s := range []byte{1, 2} {
		if pdu := m.read(s, 3, 0, 1); len(pdu.Data) != 3 {
			t.Errorf("slave %d after silence: % x", s, pdu.Data)
		}
	}
	// A broadcast write reaches every device without a reply.
	if adu := m.ask(rtuRequest(t, 0, 6, u16s(15, 0xBEEF)...), quiet); adu != nil {
		t.Errorf("broadcast write answered % x", adu)
	}
	for _, s := range []byte{1, 2} {
		if pdu := m.read(s, 3, 15, 1); binary.BigEndian.Uint16(pdu.Data[1:]) != 0xBEEF {
			t.Errorf("slave %d: broadcast write not applied: % x", s, pdu.Data)
		}
	}
	st := e.Stats()
	if st.Ignored != 3 || st.Garbage != 2 {
		t.Errorf("Ignored %d Garbage %d, want 3 and 2", st.Ignored, st.Garbage)
	}
	if s := st.Slaves[1]; s.Requests != 2 || s.Replies != 2 {
		t.Errorf("slave 1 stats %+v, want 2 requests and 2 replies", s)
	}
}

// TestWrites: single and multiple writes of registers and coils are read
// back, in Values too.
func TestWrites(t *testing.T) {
	e, m := newRTUConn(t, []Device{weather(t, 1, Faults{})}, Options{})
	echo := func(req []byte, wantData []byte) {
		t.Helper()
		pdu := checkRTU(t, m.ask(req, time.Second))
		if pdu.FunctionCode != req[1] || string(pdu.Data) != string(wantData) {
			t.Fatalf("write reply fc %#x % x, want fc %#x % x", pdu.FunctionCode, pdu.Data, req[1], wantData)
		}
	}
	echo(rtuRequest(t, 1, 6, u16s(0, 0xFF38)...), u16s(0, 0xFF38)) // Temperature := -20.0
	echo(rtuRequest(t, 1, 16, append(u16s(10, 2), 4, 0, 1, 0, 2)...), u16s(10, 2))
	echo(rtuRequest(t, 1, 5, u16s(5, 0xFF00)...), u16s(5, 0xFF00))
	echo(rtuRequest(t, 1, 15, append(u16s(0, 3), 1, 0b101)...), u16s(0, 3))

	v := e.Values(1, fixedNow)
	if v["Temperature"] != -20 {
		t.Errorf("Temperature after write: %v, want -20", v["Temperature"])
	}
	if want := float64(0x10002) * 0.1; math.Abs(v["RainTotal"]-want) > 1e-9 {
		t.Errorf("RainTotal after write: %v, want %v", v["RainTotal"], want)
	}
	if v["Relay"] != 1 {
		t.Errorf("Relay after write: %v, want 1", v["Relay"])
	}
	if pdu := m.read(1, 3, 10, 2); string(pdu.Data[1:]) != "\x00\x01\x00\x02" {
		t.Errorf("holding 10-11: % x", pdu.Data[1:])
	}
	if pdu := m.read(1, 1, 0, 6); pdu.Data[1] != 0b100101 {
		t.Errorf("coils 0-5: %08b, want 00100101", pdu.Data[1])
	}
}

// TestFaults: at share 1 each fault always happens, at 0 never.
func TestFaults(t *testing.T) {
	req := func(t testing.TB) []byte { return rtuRequest(t, 1, 3, u16s(0, 4)...) }
	t.Run("drop", func(t *testing.T) {
		e, m := newRTUConn(t, []Device{weather(t, 1, Faults{Drop: 1})}, Options{})
		for range 3 {
			if adu := m.ask(req(t), 100*time.Millisecond); adu != nil {
				t.Fatalf("dropped request answered % x", adu)
			}
		}
		if s := e.Stats().Slaves[1]; s.Requests != 3 || s.Dropped != 3 || s.Replies != 0 {
			t.Errorf("stats %+v", s)
		}
	})
	t.Run("bad CRC", func(t *testing.T) {
		e, m := newRTUConn(t, []Device{weather(t, 1, Faults{BadCRC: 1})}, Options{})
		for range 5 {
			adu := m.ask(req(t), time.Second)
			if adu == nil || len(adu) != 13 || adu[0] != 1 || adu[1] != 3 || adu[2] != 8 {
				t.Fatalf("reply % x, want a 13-byte read reply", adu)
			}
			if _, err := gm.NewRTUClientHandler("").Decode(adu); err == nil {
				t.Fatalf("reply % x has a valid CRC", adu)
			}
		}
		if s := e.Stats().Slaves[1]; s.Replies != 5 || s.CRCCorrupted != 5 {
			t.Errorf("stats %+v", s)
		}
	})
	t.Run("exception", func(t *testing.T) {
		e, m := newRTUConn(t, []Device{weather(t, 1, Faults{Exception: 1})}, Options{})
		for range 5 {
			pdu := checkRTU(t, m.ask(req(t), time.Second))
			if pdu.FunctionCode != 0x83 || pdu.Data[0] != 4 {
				t.Fatalf("reply fc %#x % x, want exception 4", pdu.FunctionCode, pdu.Data)
			}
		}
		if s := e.Stats().Slaves[1]; s.Exceptions != 5 {
			t.Errorf("stats %+v", s)
		}
	})
	t.Run("none", func(t *testing.T) {
		e, m := newRTUConn(t, []Device{weather(t, 1, Faults{})}, Options{})
		for range 50 {
			pdu := checkRTU(t, m.ask(req(t), time.Second))
			if pdu.FunctionCode != 3 {
				t.Fatalf("reply fc %#x % x", pdu.FunctionCode, pdu.Data)
			}
		}
		if s := e.Stats().Slaves[1]; s != (SlaveStats{Requests: 50, Replies: 50}) {
			t.Errorf("stats %+v", s)
		}
	})
	t.Run("half, repeatable", func(t *testing.T) {
		// The same seed gives the same faults, request by request.
		pattern := func() string {
			_, m := newRTUConn(t, []Device{weather(t, 1, Faults{Exception: 0.5})}, Options{Seed: 9})
			var s []byte
			for range 40 {
				s = append(s, checkRTU(t, m.ask(req(t), time.Second)).FunctionCode)
			}
			return fmt.Sprintf("% x", s)
		}
		a, b := pattern(), pattern()
		if a != b {
			t.Errorf("seed 9 gave two fault patterns:\n%s\n%s", a, b)
		}
		if n := countByte(a, "83"); n < 10 || n > 30 {
			t.Errorf("%d exceptions in 40 at share 0.5", n)
		}
	})
	t.Run("turnaround", func(t *testing.T) {
		_, m := newRTUConn(t, []Device{weather(t, 1, Faults{Turnaround: 40 * time.Millisecond})}, Options{})
		start := time.Now()
		m.ask(req(t), time.Second)
		d := time.Since(start)
		if d < 40*time.Millisecond || (checkWireTiming && d > 400*time.Millisecond) {
			t.Errorf("reply after %v, want about 40ms", d)
		}
	})
}

func countByte(s, b string) int {
	n := 0
	for i := 0; i+len(b) <= len(s); i += 3 {
		if s[i:i+len(b)] == b {
			n++
		}
	}
	return n
}

// TestTCP drives ServeTCP with goburrow's Modbus TCP client from several
// connections at once; goburrow checks the echoed transaction id.
func TestTCP(t *testing.T) {
	dev := weather(t, 5, Faults{Turnaround: 2 * time.Millisecond})
	e := newEmu(t, []Device{dev}, Options{Seed: 3})
	addr := testtool.ServeLoopback(t, e.ServeTCP)
	want := e.Values(5, fixedNow)

	const conns, reqs = 8, 20
	var wg sync.WaitGroup
	errs := make(chan error, conns)
	for range conns {
		wg.Go(func() {
			h := gm.NewTCPClientHandler(addr)
			h.SlaveId = 5
			h.Timeout = 2 * time.Second
			defer h.Close()
			c := gm.NewClient(h)
			for range reqs {
				b, err := c.ReadHoldingRegisters(0, 6)
				if err != nil {
					errs <- err
					return
				}
				got := decodeWords(dev.Profile, profile.Holding, 0, b)
				for _, k := range []string{"Temperature", "Humidity", "WindSpeed", "WindDirection"} {
					if got[k] != want[k] {
						errs <- fmt.Errorf("%s: served %v, Values says %v", k, got[k], want[k])
						return
					}
				}
			}
		})
	}
	wg.Wait()
	close(errs)
	for err := range errs {
		t.Error(err)
	}
	if s := e.Stats().Slaves[5]; s.Requests != conns*reqs || s.Replies != conns*reqs {
		t.Errorf("stats %+v, want %d requests and replies", s, conns*reqs)
	}

	// Exceptions come back as Modbus exceptions; other unit ids stay silent.
	h := gm.NewTCPClientHandler(addr)
	h.SlaveId = 5
	h.Timeout = 300 * time.Millisecond
	defer h.Close()
	c := gm.NewClient(h)
	var me *gm.ModbusError
	if _, err := c.ReadHoldingRegisters(6, 1); !errors.As(err, &me) || me.ExceptionCode != 2 {
		t.Errorf("read of the hole: %v, want exception 2", err)
	}
	h.SlaveId = 6
	if _, err := c.ReadHoldingRegisters(0, 1); err == nil {
		t.Error("unit 6 (not emulated) answered")
	}
	if s := e.Stats(); s.Ignored != 1 {
		t.Errorf("Ignored %d, want 1", s.Ignored)
	}
}

// TestTCPBadCRCIgnored: Modbus TCP has no CRC, so the BadCRC fault does
// not apply there.
func TestTCPBadCRCIgnored(t *testing.T) {
	e := newEmu(t, []Device{weather(t, 5, Faults{BadCRC: 1})}, Options{})
	h := gm.NewTCPClientHandler(testtool.ServeLoopback(t, e.ServeTCP))
	h.SlaveId = 5
	h.Timeout = time.Second
	defer h.Close()
	if _, err := gm.NewClient(h).ReadInputRegisters(0, 1); err != nil {
		t.Fatal(err)
	}
	if s := e.Stats().Slaves[5]; s.CRCCorrupted != 0 {
		t.Errorf("stats %+v", s)
	}
}

func TestNewRefuses(t *testing.T) {
	p := parse(t, "weather", weatherYAML)
	line := &profile.Profile{Name: "nmea", Line: &profile.Line{}}
	for _, c := range []struct {
		name string
		devs []Device
	}{
		{"slave 0", []Device{{Slave: 0, Profile: p}}},
		{"slave 248", []Device{{Slave: 248, Profile: p}}},
		{"duplicate", []Device{{Slave: 1, Profile: p}, {Slave: 1, Profile: p}}},
		{"no profile", []Device{{Slave: 1}}},
		{"line profile", []Device{{Slave: 1, Profile: line}}},
		{"drop > 1", []Device{{Slave: 1, Profile: p, Faults: Faults{Drop: 1.5}}}},
		{"NaN exception", []Device{{Slave: 1, Profile: p, Faults: Faults{Exception: math.NaN()}}}},
		{"negative turnaround", []Device{{Slave: 1, Profile: p, Faults: Faults{Turnaround: -1}}}},
		{"negative write reply delay", []Device{{Slave: 1, Profile: p, Faults: Faults{WriteReplyDelay: -1}}}},
	} {
		if _, err := New(c.devs, Options{}); err == nil {
			t.Errorf("%s: accepted", c.name)
		}
	}
	// A refused device is named by its profile, not only its position.
	q := parse(t, "other", weatherYAML)
	_, err := New([]Device{{Slave: 1, Profile: p}, {Slave: 1, Profile: q}}, Options{})
	if err == nil || !strings.Contains(err.Error(), "profile other") || !strings.Contains(err.Error(), "profile weather") {
		t.Errorf("duplicate slave id: %v, want both profiles named", err)
	}
}
