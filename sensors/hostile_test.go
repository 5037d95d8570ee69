package sensors_test

import (
	"context"
	"math/rand/v2"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"fieldlink/internal/testtool"
	"fieldlink/packet"
	"fieldlink/sensors"
	"fieldlink/sensors/emulator"
	"fieldlink/sensors/plan"
)

// These tests put a hostile device on a bus next to a well-behaved one,
// poll both through the real scheduler and the real transport, and check
// that the bus survives: the good device keeps its schedule, the bad
// device's errors name it, and the bad device is back once it behaves.

// A hostile behaviour: what the misbehaving slave does instead of a reply.
type behaviour int

const (
	behaveWell   behaviour = iota
	wrongSlave             // a well-formed reply carrying another slave id
	wrongFC                // a well-formed reply to another function
	randomLength           // a reply whose data is of a random, wrong length
	endless                // a stream that does not stop by the deadline
	drip                   // a correct reply, one byte every 900 ms
)

// dripEvery is the pace of the drip behaviour.
const dripEvery = 900 * time.Millisecond

const (
	goodSlave = 1
	badSlave  = 2
)

var hostileCases = []struct {
	name string
	b    behaviour
	// timeout of the bus; the drip needs one long enough for two bytes to
	// arrive (at 0 and 900 ms, with 600 ms to spare on a busy machine) and
	// short enough that the third (at 1.8 s) would arrive only if they
	// pushed the deadline back.
	timeout time.Duration
	// rtuErr, tcpErr: what the bad device's error must say.
	rtuErr, tcpErr string
}{
	{"wrong slave id", wrongSlave, 500 * time.Millisecond, "reply from slave 1", "reply from unit 1"},
	{"wrong function code", wrongFC, 500 * time.Millisecond, "function code", "function code"},
	{"random length", randomLength, 500 * time.Millisecond, "modbus:", "modbus:"}, // short, CRC or trailing bytes, at random
	// An endless stream of random bytes can hold a frame that parses up to
	// its CRC: the error is then the CRC's, not the busy line's.
	{"endless stream", endless, 500 * time.Millisecond, "modbus:", "stale transaction id"},
	{"slow drip", drip, 1500 * time.Millisecond, "got 2 of 3 bytes", "got 2 bytes of a reply"},
}

// hostile decides what slave 2 does with each request, and owns the
// goroutine of a behaviour that outlives the request (a stream, a drip).
type hostile struct {
	mode atomic.Int32
	// streamFor is how long the endless stream goes on: longer than the
	// bus timeout, so the master must cut it off.
	streamFor time.Duration

	mu     sync.Mutex // guards cancel
	cancel context.CancelFunc
	rmu    sync.Mutex // guards rng
	rng    *rand.Rand
	wg     sync.WaitGroup
}

func newHostile(streamFor time.Duration) *hostile {
	return &hostile{streamFor: streamFor, rng: rand.New(rand.NewPCG(7, 9))}
}

func (h *hostile) behaviour() behaviour { return behaviour(h.mode.Load()) }

func (h *hostile) set(b behaviour) { h.mode.Store(int32(b)) }

// start runs f in a goroutine that the next start, or stop, cancels and
// waits for.
func (h *hostile) start(ctx context.Context, f func(ctx context.Context)) {
	h.mu.Lock()
	defer h.mu.Unlock()
	if h.cancel != nil {
		h.cancel()
	}
	h.wg.Wait()
	ctx, h.cancel = context.WithCancel(ctx)
	h.wg.Go(func() { f(ctx) })
}

func (h *hostile) stop() {
	h.mu.Lock()
	defer h.mu.Unlock()
	if h.cancel != nil {
		h.cancel()
	}
	h.wg.Wait()
}

func (h *hostile) intn(n int) int {
	h.rmu.Lock()
	defer h.rmu.Unlock()
	return h.rng.IntN(n)
}

func (h *hostile) bytes(n int) []byte {
	h.rmu.Lock()
	defer h.rmu.Unlock()
	b := make([]byte, n)
	for i := range b {
		b[i] = byte(h.rng.Uint32())
	}
	return b
}

// replyData is the data part of a read reply (fc 1–4) to qty items.
func replyData(fc byte, qty uint16) []byte {
	n := 2 * int(qty)
	if fc <= 2 {
		n = (int(qty) + 7) / 8
	}
	b := make([]byte, n)
	for i := range b {
		b[i] = byte(i + 1)
	}
	return b
}

// badPDU returns the PDU (function code onwards) and the apparent unit of
// a reply of behaviour b to a read of qty with fc; endless and drip have
// their own writers.
func (h *hostile) badPDU(b behaviour, fc byte, qty uint16) (unit byte, pdu []byte) {
	data := replyData(fc, qty)
	switch b {
	case wrongSlave:
		return goodSlave, append([]byte{fc, byte(len(data))}, data...)
	case wrongFC:
		other := byte(4)
		if fc == 4 {
			other = 3
		}
		return badSlave, append([]byte{other, byte(len(data))}, data...)
	case randomLength:
		n := h.intn(2*len(data) + 8)
		if n >= len(data) {
			n++ // never the right length
		}
		return badSlave, append([]byte{fc, byte(len(data))}, h.bytes(n)...)
	}
	panic("no PDU for this behaviour")
}

// --- the test --------------------------------------------------------------

func TestHostileDeviceOnSharedBus(t *testing.T) {
	set := embedded(t)
	wind, gas := set["generic-wind-speed"], set["generic-mine-methane"]
	for _, transport := range []string{"rtu", "tcp"} {
		t.Run(transport, func(t *testing.T) {
			for _, tc := range hostileCases {
				t.Run(tc.name, func(t *testing.T) {
					emu, err := emulator.New([]emulator.Device{
						{Slave: goodSlave, Profile: wind},
						{Slave: badSlave, Profile: gas},
					}, emulator.Options{Seed: 5})
					if err != nil {
						t.Fatal(err)
					}
					h := newHostile(tc.timeout * 3 / 2)
					h.set(tc.b)
					var url, wantErr string
					cost := plan.Serial(38400, 10, 0)
					if transport == "rtu" {
						url, wantErr = startHostileRTU(t, h, emu, 38400), tc.rtuErr
					} else {
						url, wantErr = startHostileTCP(t, h, emu), tc.tcpErr
						cost = plan.Cost{CharTime: 100 * time.Nanosecond, Turnaround: time.Millisecond}
					}
					runHostile(t, url, tc.timeout, cost, h, wantErr)
				})
			}
		})
	}
}

// runHostile polls a good device (every 50 ms) and the hostile one (every
// second) on one bus for a while, then makes the hostile one behave.
func runHostile(t *testing.T, url string, timeout time.Duration, cost plan.Cost, h *hostile, wantErr string) {
	set := embedded(t)
	const (
		goodEvery = 50 * time.Millisecond
		misbehave = 5 * time.Second
		busName   = "line-7"
	)
	specs := []sensors.DeviceSpec{
		{Name: "anemometer-good", Slave: goodSlave, Profile: set["generic-wind-speed"], Interval: goodEvery},
		{Name: "methane-hostile", Slave: badSlave, Profile: set["generic-mine-methane"], Interval: time.Second},
	}
	bus, err := sensors.NewBus(busName, open(t, url, timeout), specs, sensors.BusOptions{
		Cost: cost, MaxGap: -1, Backoff: 2 * time.Second,
	})
	if err != nil {
		t.Fatal(err)
	}
	var mu sync.Mutex
	count := map[string]int{}
	packets := func(name string) int {
		mu.Lock()
		defer mu.Unlock()
		return count[name]
	}
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan struct{})
	go func() {
		defer close(done)
		bus.Run(ctx, func(p *packet.Packet) {
			mu.Lock()
			count[p.DeviceID]++
			mu.Unlock()
		})
	}()
	stopped := false
	stop := func() {
		if stopped {
			return
		}
		stopped = true
		cancel()
		select {
		case <-done:
		case <-time.After(2*timeout + 5*time.Second):
			t.Fatal("the bus did not stop: a request hangs")
		}
	}
	defer stop()

	// Phase 1: the hostile device misbehaves on every request, long
	// enough to be backed off.
	testtool.WaitFor(t, misbehave+10*time.Second, "the hostile device to fail four times", func() bool {
		return bus.Status()[1].Errors >= 4
	})
	st := bus.Status()
	good, bad := st[0], st[1]
	if n := packets(specs[1].Name); n != 0 {
		t.Errorf("the hostile device produced %d packets while misbehaving", n)
	}
	// The good device is not starved: it is always due before the hostile
	// one, which waits a second or more between polls, so the scheduler
	// polls the good device between any two polls of the hostile one.
	// Counted, not timed: a loaded machine slows both alike.
	if good.Polls < bad.Polls {
		t.Errorf("good device: %d polls while the hostile one had %d; status %+v", good.Polls, bad.Polls, good)
	}
	limit := good.Polls / 5
	if behaviour(h.mode.Load()) == endless {
		// A babble the test's writer cannot keep gapless on a machine
		// too busy to run it on time: a gap longer than the quiet the
		// master waits for passes for silence, and the good device's
		// next request or two go out into the rest of the stream (seen
		// at a load of 10 on 2 cores). Each babble may spoil two.
		limit = max(limit, 2*bad.Errors)
	}
	if good.Errors > limit {
		t.Errorf("good device: %d of %d polls failed (at most %d may); last error: %s", good.Errors, good.Polls, limit, good.LastError)
	}
	// The bad device's error names it, its slave id and the bus, and says
	// what was wrong.
	for _, want := range []string{"device " + specs[1].Name, "slave 2", "bus " + busName, wantErr} {
		if !strings.Contains(bad.LastError, want) {
			t.Errorf("hostile device's error %q does not say %q", bad.LastError, want)
		}
	}
	if bad.Health == sensors.OK || bad.Errors < 2 {
		t.Errorf("hostile device: %+v", bad)
	}
	t.Logf("misbehaving: good %d/%d polls ok, hostile %d errors, last: %s",
		good.Polls-good.Errors, good.Polls, bad.Errors, bad.LastError)

	// Phase 2: it behaves again, and is read again within its backoff.
	h.set(behaveWell)
	h.stop()
	testtool.WaitFor(t, 15*time.Second, "the hostile device to recover", func() bool {
		return packets(specs[1].Name) > 0 && bus.Status()[1].Health == sensors.OK
	})
	before := packets(specs[0].Name)
	testtool.WaitFor(t, 10*time.Second, "the good device to go on being polled", func() bool {
		return packets(specs[0].Name) >= before+5
	})
	stop()
	if st := bus.Status(); st[0].Health != sensors.OK || st[1].Health != sensors.OK {
		t.Errorf("after recovery: %+v", st)
	}
}
