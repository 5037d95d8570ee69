package selector

import (
	"context"
	"errors"
	"fmt"
	"math/bits"
	"math/rand/v2"
	"runtime"
	"sync"
	"sync/atomic"
	"time"
)

// MaxUpstreams is the most upstreams a [Table] holds at once: a skip mask
// passed to [Strategy.Pick] is one uint64.
const MaxUpstreams = 64

// maxWeight bounds a static weight, so that weight × in-flight and the sum of
// the weights of every upstream stay far from overflow.
const maxWeight = 1_000_000

// Options configures a [Table]. The zero value is the default; every field
// says what its zero value means.
type Options struct {
	// Now is the clock every time in the table is read from: delivery
	// start and end, probe and report ages, EWMA decay. Default time.Now.
	// Tests and the selector lab inject a simulated clock. Now must be safe
	// for concurrent use.
	//
	// Begin, End, Probe, Report and Snapshot read it. Pick mostly does not
	// (a clock read can cost as much as a whole pick): a strategy that needs
	// the time on every pick uses the table's latest reading, to the
	// millisecond, so with a simulated clock time reaches it through those
	// calls. Each strategy's description says what it reads.
	Now func() time.Time

	// Seed seeds the one random stream that every strategy draws from.
	//
	// Zero (the default) draws from the runtime's generator (math/rand/v2's
	// top-level functions): a different stream in every process, so that
	// identical gateways do not make identical choices, and no shared state
	// between goroutines under parallel Pick.
	//
	// Any other value makes the table reproducible: the same operations in
	// the same order, from one goroutine, with the same clock readings, give
	// the same picks. The stream is then a splitmix64 generator over an
	// atomic counter, so concurrent use stays safe (the interleaving decides
	// which goroutine gets which draw).
	Seed uint64

	// Window is how many of an upstream's latest delivery latencies
	// LatencyMean and LatencyStdDev are computed over. Default 64.
	Window int

	// Decay is the time constant τ of LatencyEWMA and PeakEWMA: a sample's
	// weight falls by e every Decay. Default 10 s, Finagle's and linkerd's
	// decay time.
	Decay time.Duration

	// FailurePenalty is the round-trip that PeakEWMA records for a failed
	// delivery that ended sooner than that, so that fast failures do not
	// look fast. Default 5 s, the penalty of linkerd's load biaser.
	FailurePenalty time.Duration

	// LoadTTL is how long a server-reported [Load] stays fresh after its At.
	// A staler report is not shown to strategies: they fall back as though
	// none had come. Default 30 s.
	LoadTTL time.Duration
}

// Table holds the live statistics of a set of upstreams. It does no I/O:
// the uplink feeds it with [Table.Begin] and [Table.End] around every
// delivery, [Table.Probe], [Table.Report] and [Table.SetUp], and a
// [Strategy] reads it in [Strategy.Pick].
//
// A Table is safe for concurrent use. Pick reads atomics only; Begin and End
// are atomics and, in End, a critical section of a few field updates on the
// upstream; none of them allocates. Add, Retire and SetUp serialise on one
// mutex; they are rare.
//
// An upstream is known by the index [Table.Add] returns. Indexes are dense
// from 0 and stable: a retired upstream keeps its index until a later Add
// needs the slot (see [Table.Add]).
//
// Methods that take an index panic when no upstream was ever added there,
// as a slice index out of range would.
type Table struct {
	now     func() time.Time
	epoch   time.Time // now() at NewTable; internal clock readings are ns since epoch
	window  int
	tau     float64 // Decay in ns
	penalty int64   // FailurePenalty in ns
	loadTTL time.Duration
	seed    uint64

	// Written often, each on a cache line of its own, away from what every
	// pick reads.
	_    [64]byte
	rng  atomic.Uint64 // the seeded random stream's counter: every seeded draw
	_    [56]byte
	seen atomic.Int64 // latest clock reading by Begin, End, Probe, Report or Snapshot, to the ms
	_    [56]byte
	fail atomic.Uint64 // failures recorded, all upstreams
	_    [56]byte

	live atomic.Uint64 // bit i: upstream i exists, is up and is not retired
	n    atomic.Int32  // slots ever used: every index below n has an upstream
	gen  atomic.Uint64 // changes whenever the set of upstreams does (Add of a new or retired name, Retire)
	cfg  atomic.Uint64 // changes whenever gen or a weight does
	ver  atomic.Uint64 // changes whenever cfg or live does: see version

	mu    sync.Mutex // serialises Add, Retire, SetUp
	ups   [MaxUpstreams]atomic.Pointer[upstream]
	slots [MaxUpstreams]slot
}

// slot holds what a scan over every upstream reads, packed: 16 upstreams
// fit in four cache lines.
type slot struct {
	// state is the in-flight count in the low 48 bits and, above them, the
	// generation of the upstream that holds the slot. When Add gives a
	// retired upstream's slot to a new one, the generation changes, and the
	// late ends of deliveries to the old one no longer count.
	state  atomic.Uint64
	weight atomic.Int64
}

const (
	genShift  = 48
	countMask = 1<<genShift - 1
)

// inflight is the in-flight count in a slot state.
func inflight(state uint64) int64 { return int64(state & countMask) }

// NewTable returns an empty table.
func NewTable(opt Options) *Table {
	t := &Table{
		now:     opt.Now,
		window:  opt.Window,
		tau:     float64(opt.Decay),
		penalty: int64(opt.FailurePenalty),
		loadTTL: opt.LoadTTL,
		seed:    opt.Seed,
	}
	if t.now == nil {
		t.now = time.Now
	}
	if t.window <= 0 {
		t.window = 64
	}
	if t.tau <= 0 {
		t.tau = float64(10 * time.Second)
	}
	if t.penalty <= 0 {
		t.penalty = int64(5 * time.Second)
	}
	if t.loadTTL <= 0 {
		t.loadTTL = 30 * time.Second
	}
	t.rng.Store(opt.Seed)
	t.epoch = t.now()
	return t
}

// Add adds an upstream, up, and returns its index. A weight ≤ 0 means 1;
// weights above 1,000,000 are clamped to it.
//
// Adding a name that the table already holds, retired or not, updates its
// weight and returns its index; a retired upstream comes back up, with the
// statistics it had.
//
// A new name takes the next unused index. When all [MaxUpstreams] indexes
// have been used, it takes the lowest index of a retired upstream: deliveries
// still in flight to the retired one end on its old statistics, and a
// strategy starts the new one afresh. Callers must therefore forget the index
// of an upstream they retire, and retire the upstreams a new list drops
// before they add the ones it brings: a list that churns names then never
// fills the table. When all MaxUpstreams upstreams are live, Add changes
// nothing and returns an error that wraps [ErrFull].
func (t *Table) Add(name string, weight int) (int, error) {
	if weight <= 0 {
		weight = 1
	}
	weight = min(weight, maxWeight)
	t.mu.Lock()
	defer t.mu.Unlock()
	n := int(t.n.Load())
	for i := range n {
		u := t.ups[i].Load()
		if u.name != name {
			continue
		}
		t.slots[i].weight.Store(int64(weight))
		t.cfg.Add(1)
		t.ver.Add(1)
		if u.retired.Load() {
			u.retired.Store(false)
			u.up.Store(true)
			t.gen.Add(1)
		}
		t.setLive(i, u.up.Load())
		return i, nil
	}
	slot := -1
	if n < MaxUpstreams {
		slot = n
	} else {
		for i := range n {
			if t.ups[i].Load().retired.Load() {
				slot = i
				break
			}
		}
	}
	if slot < 0 {
		return -1, fmt.Errorf("%w: cannot add %q: all %d upstreams are live", ErrFull, name, MaxUpstreams)
	}
	sl := &t.slots[slot]
	gen := (sl.state.Load()>>genShift + 1) & (1<<(64-genShift) - 1)
	u := newUpstream(name, slot, gen, t.window)
	t.ups[slot].Store(u)
	sl.state.Store(gen << genShift)
	sl.weight.Store(int64(weight))
	if slot == n {
		t.n.Store(int32(n + 1))
	}
	t.gen.Add(1)
	t.cfg.Add(1)
	t.ver.Add(1)
	t.setLive(slot, true)
	return slot, nil
}

// Retire stops upstream i from being picked, for good: the registry removed
// it. Deliveries in flight to it may still End. Adding its name again
// brings it back.
func (t *Table) Retire(i int) {
	t.mu.Lock()
	defer t.mu.Unlock()
	u := t.get(i)
	if u.retired.Load() {
		return
	}
	u.retired.Store(true)
	t.gen.Add(1)
	t.cfg.Add(1)
	t.ver.Add(1)
	t.setLive(i, false)
}

// SetUp records the connection state of upstream i, as the uplink sees it.
// A down upstream is never picked: when no upstream is up, Pick returns
// ok=false and the uplink leaves packets in the buffer.
func (t *Table) SetUp(i int, up bool) {
	t.mu.Lock()
	defer t.mu.Unlock()
	u := t.get(i)
	u.up.Store(up)
	t.setLive(i, up && !u.retired.Load())
}

// setLive sets or clears bit i of the live mask; t.mu is held.
func (t *Table) setLive(i int, on bool) {
	old := t.live.Load()
	m := old
	if on {
		m |= 1 << i
	} else {
		m &^= 1 << i
	}
	if m != old {
		t.live.Store(m)
		t.ver.Add(1)
	}
}

// version changes whenever an upstream is added or retired, a weight
// changes, or an upstream goes up or down: whatever a strategy that
// recomputes its weights off the pick path must not wait a period to see.
func (t *Table) version() uint64 { return t.ver.Load() }

// Ticket is one delivery in flight, from [Table.Begin] to [Table.End]. It is
// a small value; copy it freely, End it exactly once.
type Ticket struct {
	u     *upstream
	start time.Time
}

// Index is the index of the upstream the delivery went to.
func (tk Ticket) Index() int {
	if tk.u == nil {
		return -1
	}
	return tk.u.index
}

// Start is when the delivery began, on the table's clock.
func (tk Ticket) Start() time.Time { return tk.start }

// Begin records that a delivery to upstream i starts: its in-flight count
// goes up until the returned ticket is passed to [Table.End].
func (t *Table) Begin(i int) Ticket {
	t.get(i)
	sl := &t.slots[i]
	for {
		u := t.ups[i].Load()
		v := sl.state.Load()
		if v>>genShift != u.gen {
			runtime.Gosched() // Add is giving the slot to a new upstream
			continue
		}
		if sl.state.CompareAndSwap(v, v+1) {
			now := t.now()
			t.touch(now)
			return Ticket{u: u, start: now}
		}
	}
}

// End records that the delivery of tk ended, with err nil when the upstream
// acknowledged it. Its latency (now − tk.Start()) goes into the upstream's
// latency statistics whatever the outcome, as Ribbon records it.
//
// A non-nil err is a failure of the upstream: it counts in Failures,
// ConsecutiveFailures (which any success resets) and FailuresLastSecond,
// and PeakEWMA records at least Options.FailurePenalty for it. An err that
// is or wraps context.DeadlineExceeded, or has a Timeout() bool method
// returning true (net.Error, os.ErrDeadlineExceeded), also counts as a
// timeout. An err that is or wraps context.Canceled says nothing about the
// upstream (the gateway gave up, e.g. on shutdown): only the in-flight
// count goes down.
//
// End each ticket once; a second End of it does not lower the in-flight
// count again, unless deliveries to the same upstream are still open. A
// zero Ticket is ignored.
func (t *Table) End(tk Ticket, err error) {
	u := tk.u
	if u == nil {
		return
	}
	if err == nil || !errors.Is(err, context.Canceled) {
		t.record(u, tk.start, t.now(), err)
	}
	sl := &t.slots[u.index]
	for {
		v := sl.state.Load()
		if v>>genShift != u.gen || v&countMask == 0 {
			return // the slot went to another upstream, or End twice
		}
		if sl.state.CompareAndSwap(v, v-1) {
			return
		}
	}
}

// Probe records a latency probe of upstream i: its round-trip, or err when
// the probe failed.
func (t *Table) Probe(i int, rtt time.Duration, err error) {
	u := t.get(i)
	now := t.now()
	t.touch(now)
	u.mu.Lock()
	defer u.mu.Unlock()
	if err != nil {
		u.probeFailures++
		u.probeConsecutive++
		return
	}
	u.probeConsecutive = 0
	u.probeAt = now
	u.probeRTT.Store(int64(max(rtt, 1))) // 0 means "no probe yet"
}

// Report records the load upstream i reported about itself. A zero l.At
// means now. The report is fresh until l.At + Options.LoadTTL; a later
// report replaces it.
func (t *Table) Report(i int, l Load) {
	u := t.get(i)
	now := t.now()
	t.touch(now)
	if l.At.IsZero() {
		l.At = now
	}
	u.mu.Lock()
	defer u.mu.Unlock()
	u.load = l
	u.hasLoad = true
}

// Len is the number of indexes in use, retired upstreams included: every
// index in [0, Len()) names an upstream.
func (t *Table) Len() int { return int(t.n.Load()) }

// Candidates returns the mask of the upstreams Pick may return: bit i is set
// when upstream i is up, not retired and not in skip.
func (t *Table) Candidates(skip uint64) uint64 { return t.live.Load() &^ skip }

// InFlight is the number of deliveries to upstream i that began and have not
// ended.
func (t *Table) InFlight(i int) int {
	t.get(i)
	return int(inflight(t.slots[i].state.Load()))
}

// get returns upstream i or panics with a clear message.
func (t *Table) get(i int) *upstream {
	if i < 0 || i >= int(t.n.Load()) {
		panic(fmt.Sprintf("selector: upstream index %d out of range [0, %d)", i, t.n.Load()))
	}
	return t.ups[i].Load()
}

// clock is the table's time in ns since the table was made.
func (t *Table) clock() int64 { return int64(t.now().Sub(t.epoch)) }

// touch notes a clock reading for lastSeen. The shared word is written at
// most once a millisecond of table time.
func (t *Table) touch(now time.Time) {
	if c := int64(now.Sub(t.epoch)); c >= t.seen.Load()+int64(time.Millisecond) {
		t.seen.Store(c)
	}
}

// lastSeen is the table time of the latest clock reading by Begin, End,
// Probe, Report or Snapshot, to the millisecond: a strategy that needs the
// time on every pick reads this instead of the clock, which costs more
// than a whole pick on some machines.
func (t *Table) lastSeen() int64 { return t.seen.Load() }

// rand64 is the next value of the table's random stream (see Options.Seed).
func (t *Table) rand64() uint64 {
	if t.seed == 0 {
		return rand.Uint64()
	}
	// splitmix64 (Steele, Lea, Flood 2014) over a Weyl sequence.
	z := t.rng.Add(0x9e3779b97f4a7c15)
	z = (z ^ (z >> 30)) * 0xbf58476d1ce4e5b9
	z = (z ^ (z >> 27)) * 0x94d049bb133111eb
	return z ^ (z >> 31)
}

// intN returns a uniform int in [0, n) for 0 < n ≤ 64; the bias of the
// multiply-shift reduction is below 2⁻⁵⁸.
func (t *Table) intN(n int) int {
	hi, _ := bits.Mul64(t.rand64(), uint64(n))
	return int(hi)
}

// float01 returns a uniform float64 in [0, 1).
func (t *Table) float01() float64 {
	return float64(t.rand64()>>11) / (1 << 53)
}
