package sensors_test

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"sync"
	"testing"
	"time"

	"fieldlink/packet"
	"fieldlink/sensors"
	"fieldlink/sensors/plan"
	"fieldlink/sensors/profile"
)

// opLog is a reader and writer that logs every request, takes a little
// time over each, and keeps written values so that reads give them back.
type opLog struct {
	mu   sync.Mutex
	ops  []string
	regs map[uint16][]byte
	fail error // returned by Write when set
}

func (o *opLog) Read(ctx context.Context, slave, fc byte, addr, qty uint16) ([]byte, error) {
	time.Sleep(time.Millisecond)
	o.mu.Lock()
	defer o.mu.Unlock()
	o.ops = append(o.ops, fmt.Sprintf("R%d@%d", fc, addr))
	if fc == 1 || fc == 2 {
		out := make([]byte, (qty+7)/8)
		if v := o.regs[0xF000+addr]; len(v) > 0 && v[0] == 0xFF {
			out[0] = 1
		}
		return out, nil
	}
	out := make([]byte, 2*qty)
	for i := range qty {
		copy(out[2*i:], o.regs[addr+i])
	}
	return out, nil
}

func (o *opLog) Write(ctx context.Context, slave, fc byte, addr, qty uint16, data []byte) error {
	time.Sleep(time.Millisecond)
	o.mu.Lock()
	defer o.mu.Unlock()
	o.ops = append(o.ops, fmt.Sprintf("W%d@%d:%x", fc, addr, data))
	if o.fail != nil {
		return o.fail
	}
	if o.regs == nil {
		o.regs = map[uint16][]byte{}
	}
	switch fc {
	case 5:
		o.regs[0xF000+addr] = data
	case 6, 16:
		for i := range qty {
			o.regs[addr+i] = data[2*i : 2*i+2]
		}
	}
	return nil
}

func (o *opLog) log() []string {
	o.mu.Lock()
	defer o.mu.Unlock()
	return append([]string(nil), o.ops...)
}

func valveBus(t *testing.T, r sensors.Reader) *sensors.Bus {
	t.Helper()
	prof := embedded(t)["generic-irrigation-valve"]
	spec := sensors.DeviceSpec{Name: "valve-1", Slave: 4, Profile: prof, Interval: 100 * time.Millisecond, DataType: prof.DataType}
	b, err := sensors.NewBus("field", r, []sensors.DeviceSpec{spec}, sensors.BusOptions{Cost: plan.Cost{CharTime: time.Microsecond}})
	if err != nil {
		t.Fatal(err)
	}
	if n := len(b.Requests()["valve-1"]); n < 2 {
		t.Fatalf("the valve's poll is %d requests; the test needs a poll of several", n)
	}
	return b
}

// A write on a running bus is one transaction of its schedule: it never
// lands between the requests of a poll, and its read-back follows it at
// once.
func TestWriteTakesItsTurnBetweenPolls(t *testing.T) {
	o := &opLog{}
	b := valveBus(t, o)
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan struct{})
	go func() { defer close(done); b.Run(ctx, func(*packet.Packet) {}) }()
	for i := range 20 {
		v := float64(i%2) + 20
		res, err := b.Write(context.Background(), "valve-1", "Setpoint", v)
		if err != nil || res.Err != nil || res.ReadErr != nil {
			t.Fatalf("write %d: %v %+v", i, err, res)
		}
		if got, _ := res.Readback.Float64(); got != v {
			t.Fatalf("write %d: read back %v, wrote %v", i, res.Readback, v)
		}
		time.Sleep(10*time.Millisecond + time.Duration(i%5)*4*time.Millisecond)
	}
	cancel()
	<-done
	ops := o.log()
	reqs := b.Requests()["valve-1"]
	first, last := fmt.Sprintf("R%d@%d", reqs[0].Area.FunctionCode(), reqs[0].Start), fmt.Sprintf("R%d@%d", reqs[len(reqs)-1].Area.FunctionCode(), reqs[len(reqs)-1].Start)
	polls, writes := 0, 0
	for i, op := range ops {
		if !strings.HasPrefix(op, "W") {
			continue
		}
		writes++
		if i+1 >= len(ops) || ops[i+1] != "R3@1" {
			t.Errorf("write %s at %d is not followed by its read-back: %v", op, i, ops[i:min(i+3, len(ops))])
		}
		if i > 0 && ops[i-1] != last && ops[i-1] != "R3@1" {
			t.Errorf("write %s at %d lands inside a poll: after %s (a poll ends with %s)", op, i, ops[i-1], last)
		}
	}
	for _, op := range ops {
		if op == first {
			polls++
		}
	}
	if writes != 20 || polls < 2 {
		t.Errorf("%d writes and %d polls logged, want 20 and several", writes, polls)
	}
	if st := b.Status()[0]; st.Writes != 20 {
		t.Errorf("status counts %d writes, want 20", st.Writes)
	}
}

// A value the register cannot hold is refused before anything is sent; so
// are read-only points and points that do not exist. A bus that does not
// run writes at once.
func TestWriteRefusedBeforeTheWire(t *testing.T) {
	o := &opLog{}
	b := valveBus(t, o)
	for _, tc := range []struct {
		point string
		v     float64
		want  error
	}{
		{"Setpoint", 5.15, profile.ErrNotWritable},
		{"Setpoint", -1, profile.ErrNotWritable},
		{"Flow", 1, profile.ErrNotWritable},
		{"ValveOpen", 2, profile.ErrNotWritable},
		{"Nothing", 1, sensors.ErrNoSuchPoint},
	} {
		if _, err := b.Write(context.Background(), "valve-1", tc.point, tc.v); !errors.Is(err, tc.want) {
			t.Errorf("%s = %v: err %v, want %v", tc.point, tc.v, err, tc.want)
		}
	}
	if _, err := b.Write(context.Background(), "valve-9", "Setpoint", 1); !errors.Is(err, sensors.ErrNoSuchPoint) {
		t.Errorf("unknown device: %v", err)
	}
	if ops := o.log(); len(ops) != 0 {
		t.Fatalf("refused writes sent %v", ops)
	}
	res, err := b.Write(context.Background(), "valve-1", "ValveOpen", 0)
	if err != nil || res.Err != nil {
		t.Fatal(err, res.Err)
	}
	if ops := o.log(); len(ops) != 2 || ops[0] != "W5@0:0000" || ops[1] != "R1@0" {
		t.Errorf("coil false: %v, want [W5@0:0000 R1@0]", ops)
	}
	if res.Readback != packet.Bool(false) {
		t.Errorf("read back %v", res.Readback)
	}
	o.fail = errors.New("no reply")
	res, err = b.Write(context.Background(), "valve-1", "ValveOpen", 1)
	if err != nil || res.Err == nil || res.ReadErr != nil {
		t.Errorf("a failed write: err %v, result %+v; want the write's error and a read-back", err, res)
	}
}
