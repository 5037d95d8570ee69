package emulator

import (
	"bytes"
	"fmt"
	"slices"
	"sync"
	"testing"
	"time"

	"fieldlink/sensors/profile"
)

// recorder collects what Options.OnRequest saw.
type recorder struct {
	mu   sync.Mutex
	reqs []string // reqKey of each
}

func (r *recorder) on(slave byte, pdu []byte) {
	r.mu.Lock()
	defer r.mu.Unlock()
	r.reqs = append(r.reqs, reqKey(slave, pdu))
}

func (r *recorder) all() []string {
	r.mu.Lock()
	defer r.mu.Unlock()
	return append([]string(nil), r.reqs...)
}

func reqKey(slave byte, pdu []byte) string { return fmt.Sprintf("slave %d: % x", slave, pdu) }

// The write requests of the tests below, as RTU frames for slave 1, and
// the echo each must get.
var writeCases = []struct {
	name string
	fc   byte
	data []byte // after the function code
	echo []byte
}{
	{"fc5 on", 5, u16s(5, 0xFF00), u16s(5, 0xFF00)},
	{"fc6", 6, u16s(1, 900), u16s(1, 900)},
	{"fc15", 15, append(u16s(5, 1), 1, 1), u16s(5, 1)},
	{"fc16", 16, append(u16s(10, 2), 4, 0x03, 0xE8, 0xEA, 0x60), u16s(10, 2)},
}

// TestOnRequest: the hook sees every well-framed request as it came, for
// emulated slaves, absent ones and broadcasts, and no garbage.
func TestOnRequest(t *testing.T) {
	var rec recorder
	_, m := newRTUConn(t, []Device{weather(t, 1, Faults{})}, Options{OnRequest: rec.on})
	var want []string
	for _, w := range writeCases {
		if m.ask(rtuRequest(t, 1, w.fc, w.data...), time.Second) == nil {
			t.Fatalf("%s: no reply", w.name)
		}
		want = append(want, reqKey(1, append([]byte{w.fc}, w.data...)))
	}
	// Not emulated, broadcast, and a frame with a bad CRC: silence.
	for _, req := range [][]byte{
		rtuRequest(t, 9, 6, u16s(1, 7)...),
		rtuRequest(t, 0, 6, u16s(1, 8)...),
		withCRC(1, 6, 0, 1, 0, 9)[:7],
	} {
		if adu := m.ask(req, 100*time.Millisecond); adu != nil {
			t.Fatalf("request % x answered % x", req, adu)
		}
	}
	want = append(want, reqKey(9, []byte{6, 0, 1, 0, 7}), reqKey(0, []byte{6, 0, 1, 0, 8}))
	got := rec.all()
	if len(got) != len(want) {
		t.Fatalf("OnRequest saw %d requests, want %d:\n%q\n%q", len(got), len(want), got, want)
	}
	for i := range want {
		if got[i] != want[i] {
			t.Errorf("request %d: OnRequest saw %s, want %s", i, got[i], want[i])
		}
	}
}

// TestWriteFaults: each write fault does what Faults documents, on every
// write function, and leaves reads alone.
func TestWriteFaults(t *testing.T) {
	t.Run("refuse", func(t *testing.T) {
		t.Parallel()
		e, m := newRTUConn(t, []Device{weather(t, 1, Faults{RefuseWrites: true})}, Options{})
		state := func() []byte {
			return slices.Concat(m.read(1, 3, 0, 2).Data, m.read(1, 3, 10, 2).Data, m.read(1, 1, 0, 8).Data)
		}
		before := state()
		for _, w := range writeCases {
			pdu := checkRTU(t, m.ask(rtuRequest(t, 1, w.fc, w.data...), time.Second))
			if pdu.FunctionCode != w.fc|0x80 || !bytes.Equal(pdu.Data, []byte{3}) {
				t.Errorf("%s: reply fc %#x % x, want exception 3", w.name, pdu.FunctionCode, pdu.Data)
			}
		}
		if after := state(); !bytes.Equal(after, before) {
			t.Errorf("registers or coils changed by refused writes:\n% x\n% x", before, after)
		}
		for _, a := range []struct {
			area profile.Area
			addr uint16
		}{{profile.Holding, 1}, {profile.Holding, 10}, {profile.Coil, 5}} {
			if v, ok := e.Written(1, a.area, a.addr); ok {
				t.Errorf("%v %d stored %d", a.area, a.addr, v)
			}
		}
		if s := e.Stats().Slaves[1]; s.Exceptions != 4 || s.Writes != 0 {
			t.Errorf("stats %+v, want 4 exceptions and no writes", s)
		}
	})
	t.Run("clamp", func(t *testing.T) {
		t.Parallel()
		e, m := newRTUConn(t, []Device{weather(t, 1, Faults{ClampWrite: ClampRange(100, 500)})}, Options{})
		for _, w := range writeCases {
			pdu := checkRTU(t, m.ask(rtuRequest(t, 1, w.fc, w.data...), time.Second))
			if pdu.FunctionCode != w.fc || !bytes.Equal(pdu.Data, w.echo) {
				t.Errorf("%s: reply fc %#x % x, want the normal echo % x", w.name, pdu.FunctionCode, pdu.Data, w.echo)
			}
		}
		// 900 → 500; 1000 and 60000 → 500 each; coils are not clamped.
		for _, c := range []struct {
			area profile.Area
			addr uint16
			want uint16
		}{{profile.Holding, 1, 500}, {profile.Holding, 10, 500}, {profile.Holding, 11, 500}, {profile.Coil, 5, 1}} {
			if v, ok := e.Written(1, c.area, c.addr); !ok || v != c.want {
				t.Errorf("%v %d: stored %d (%v), want %d", c.area, c.addr, v, ok, c.want)
			}
		}
		if got := m.read(1, 3, 10, 2).Data; !bytes.Equal(got, append([]byte{4}, u16s(500, 500)...)) {
			t.Errorf("read back % x, want the clamped 500, 500", got)
		}
		// Within the range, a value is stored as written.
		m.ask(rtuRequest(t, 1, 6, u16s(1, 321)...), time.Second)
		if v, _ := e.Written(1, profile.Holding, 1); v != 321 {
			t.Errorf("321 stored as %d", v)
		}
	})
	t.Run("drop reply", func(t *testing.T) {
		t.Parallel()
		e, m := newRTUConn(t, []Device{weather(t, 1, Faults{DropWriteReplies: true})}, Options{})
		for _, w := range writeCases {
			if adu := m.ask(rtuRequest(t, 1, w.fc, w.data...), 100*time.Millisecond); adu != nil {
				t.Errorf("%s: answered % x", w.name, adu)
			}
		}
		if got := m.read(1, 3, 10, 2).Data; !bytes.Equal(got, []byte{4, 0x03, 0xE8, 0xEA, 0x60}) {
			t.Errorf("read back % x: the write was not executed", got)
		}
		if got := m.read(1, 1, 5, 1).Data; !bytes.Equal(got, []byte{1, 1}) {
			t.Errorf("coil 5 read back % x, want on", got)
		}
		if s := e.Stats().Slaves[1]; s.Writes != 4 || s.Dropped != 4 || s.Replies != 2 {
			t.Errorf("stats %+v, want 4 writes and 4 dropped replies, 2 replies to the reads", s)
		}
		// A write the device refuses gets its exception all the same.
		if pdu := checkRTU(t, m.ask(rtuRequest(t, 1, 6, u16s(6, 1)...), time.Second)); pdu.FunctionCode != 0x86 || pdu.Data[0] != 2 {
			t.Errorf("write to the hole: fc %#x % x, want exception 2", pdu.FunctionCode, pdu.Data)
		}
	})
	t.Run("late", func(t *testing.T) {
		t.Parallel()
		const delay = 500 * time.Millisecond
		e, m := newRTUConn(t, []Device{weather(t, 1, Faults{WriteReplyDelay: delay})}, Options{})
		start := time.Now()
		if _, err := m.c.Write(rtuRequest(t, 1, 6, u16s(1, 777)...)); err != nil {
			t.Fatal(err)
		}
		// The write takes effect as the request is handled, not when the
		// reply goes out: once the device has counted the request (in the
		// same step as it stores), the value is there.
		for end := time.Now().Add(10 * time.Second); e.Stats().Slaves[1].Requests == 0; time.Sleep(time.Millisecond) {
			if time.Now().After(end) { // liveness only
				t.Fatal("the write never reached the device")
			}
		}
		if v, ok := e.Written(1, profile.Holding, 1); !ok || v != 777 {
			t.Fatalf("stored %d (%v) when the request was handled, want 777", v, ok)
		}
		adu := readRTU(t, m.c, m.c.SetReadDeadline, 5*time.Second)
		if d := time.Since(start); d < delay {
			t.Errorf("reply after %v, want at least %v", d, delay)
		}
		if pdu := checkRTU(t, adu); pdu.FunctionCode != 6 || !bytes.Equal(pdu.Data, u16s(1, 777)) {
			t.Errorf("late reply fc %#x % x, want the echo", pdu.FunctionCode, pdu.Data)
		}
		// Reads are not delayed: only the reply to a write.
		start = time.Now()
		m.read(1, 3, 0, 1)
		if checkWireTiming && time.Since(start) >= delay {
			t.Errorf("read took %v: delayed like a write", time.Since(start))
		}
	})
	t.Run("broadcast", func(t *testing.T) {
		t.Parallel()
		// A broadcast write meets each device's faults: slave 1 clamps,
		// slave 2 refuses, slave 3 stores as sent.
		e, m := newRTUConn(t, []Device{
			weather(t, 1, Faults{ClampWrite: ClampRange(0, 50)}),
			weather(t, 2, Faults{RefuseWrites: true}),
			weather(t, 3, Faults{}),
		}, Options{})
		if adu := m.ask(rtuRequest(t, 0, 6, u16s(1, 99)...), 100*time.Millisecond); adu != nil {
			t.Fatalf("broadcast answered % x", adu)
		}
		for _, c := range []struct {
			slave byte
			v     uint16
			ok    bool
		}{{1, 50, true}, {2, 0, false}, {3, 99, true}} {
			if v, ok := e.Written(c.slave, profile.Holding, 1); v != c.v || ok != c.ok {
				t.Errorf("slave %d: stored %d (%v), want %d (%v)", c.slave, v, ok, c.v, c.ok)
			}
		}
	})
}
