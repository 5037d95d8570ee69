package uplink

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"io"
	"net/http"
	"net/http/httptest"
	"sort"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"fieldlink/buffer"
	"fieldlink/internal/testtool"
	"fieldlink/selector"
)

// memQueue is an in-memory Queue for the loop's logic tests.
type memQueue struct {
	mu     sync.Mutex
	recs   map[uint64]buffer.Record
	leased map[uint64]bool
	acked  map[uint64]int
	dead   map[uint64]string
	wake   chan struct{}
}

func newMemQueue(n int, bad ...uint64) *memQueue {
	q := &memQueue{recs: map[uint64]buffer.Record{}, leased: map[uint64]bool{}, acked: map[uint64]int{}, dead: map[uint64]string{}, wake: make(chan struct{}, 1)}
	for s := uint64(1); s <= uint64(n); s++ {
		data := fmt.Appendf(nil, `{"DataHead":{"DataType":"Gas","DeviceId":"d%d","Seq":%d},"DataBody":{}}`, s%3, s)
		for _, b := range bad {
			if b == s {
				data = []byte("bad")
			}
		}
		q.recs[s] = buffer.Record{Seq: s, Data: data}
	}
	return q
}

func (q *memQueue) Lease(max int) ([]buffer.Record, error) {
	q.mu.Lock()
	defer q.mu.Unlock()
	var keys []uint64
	for s := range q.recs {
		if !q.leased[s] {
			keys = append(keys, s)
		}
	}
	sort.Slice(keys, func(i, j int) bool { return keys[i] < keys[j] })
	var out []buffer.Record
	for _, s := range keys {
		if len(out) == max {
			break
		}
		q.leased[s] = true
		out = append(out, q.recs[s])
	}
	return out, nil
}

func (q *memQueue) Ack(seqs ...uint64) error {
	q.mu.Lock()
	defer q.mu.Unlock()
	for _, s := range seqs {
		q.acked[s]++
		delete(q.recs, s)
		delete(q.leased, s)
	}
	return nil
}

func (q *memQueue) DeadLetter(reason string, seqs ...uint64) error {
	q.mu.Lock()
	defer q.mu.Unlock()
	for _, s := range seqs {
		q.dead[s] = reason
		delete(q.recs, s)
		delete(q.leased, s)
	}
	return nil
}

func (q *memQueue) Release(seqs ...uint64) {
	q.mu.Lock()
	for _, s := range seqs {
		delete(q.leased, s)
	}
	q.mu.Unlock()
	select {
	case q.wake <- struct{}{}:
	default:
	}
}

func (q *memQueue) Wait(ctx context.Context) error {
	for {
		q.mu.Lock()
		n := len(q.recs) - len(q.leased)
		q.mu.Unlock()
		if n > 0 {
			return nil
		}
		select {
		case <-ctx.Done():
			return ctx.Err()
		case <-q.wake:
		case <-time.After(5 * time.Millisecond):
		}
	}
}

func (q *memQueue) left() int {
	q.mu.Lock()
	defer q.mu.Unlock()
	return len(q.recs)
}

// fakeSender acknowledges after a delay, or fails.
type fakeSender struct {
	name  string
	delay time.Duration
	batch int
	down  atomic.Bool
	fail  atomic.Bool
	got   atomic.Int64
	calls atomic.Int64
}

func (f *fakeSender) Name() string  { return f.name }
func (f *fakeSender) MaxBatch() int { return f.batch }
func (f *fakeSender) Window() int   { return 8 }
func (f *fakeSender) Up() bool      { return !f.down.Load() }
func (f *fakeSender) Send(ctx context.Context, b []buffer.Record) error {
	f.calls.Add(1)
	select {
	case <-time.After(f.delay):
	case <-ctx.Done():
		return ctx.Err()
	}
	if f.fail.Load() {
		return errors.New("broker said no")
	}
	for _, r := range b {
		if bytes.Equal(r.Data, []byte("bad")) {
			return permanentErr{errors.New("422 unprocessable")}
		}
	}
	f.got.Add(int64(len(b)))
	return nil
}

func newLoop(t *testing.T, q *memQueue, strategy string, senders ...*fakeSender) (*Delivery, func()) {
	t.Helper()
	table := selector.NewTable(selector.Options{Seed: 1})
	strat, err := selector.New(strategy, selector.StrategyOptions{})
	if err != nil {
		t.Fatal(err)
	}
	d := NewDelivery(q, table, strat, DeliveryOptions{DeadLetters: q, Backoff: 50 * time.Millisecond})
	for _, s := range senders {
		idx, err := table.Add(s.name, 1)
		if err != nil {
			t.Fatal(err)
		}
		d.Add(idx, s)
	}
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan struct{})
	go func() { defer close(done); d.Run(ctx) }()
	return d, func() { cancel(); <-done }
}

func TestDeliveryAcksEachPacketOnceAndSpreads(t *testing.T) {
	q := newMemQueue(600)
	a := &fakeSender{name: "a", delay: time.Millisecond, batch: 1}
	b := &fakeSender{name: "b", delay: time.Millisecond, batch: 5}
	c := &fakeSender{name: "c", delay: time.Millisecond, batch: 1}
	d, stop := newLoop(t, q, "round_robin", a, b, c)
	testtool.WaitFor(t, 20*time.Second, "the queue to drain", func() bool { return q.left() == 0 })
	stop()
	for s, n := range q.acked {
		if n != 1 {
			t.Fatalf("seq %d acked %d times", s, n)
		}
	}
	if len(q.acked) != 600 || a.got.Load() == 0 || b.got.Load() == 0 || c.got.Load() == 0 {
		t.Fatalf("acked %d; per upstream %d %d %d", len(q.acked), a.got.Load(), b.got.Load(), c.got.Load())
	}
	if st := d.Stats(); st.Delivered != 600 || st.InFlight != 0 {
		t.Fatalf("stats %+v", st)
	}
}

func TestDeliveryRetriesElsewhereAndWaitsOutAnOutage(t *testing.T) {
	q := newMemQueue(200)
	a := &fakeSender{name: "a", delay: time.Millisecond, batch: 1}
	b := &fakeSender{name: "b", delay: time.Millisecond, batch: 1}
	a.fail.Store(true) // up but failing: its batches move to b
	_, stop := newLoop(t, q, "round_robin", a, b)
	testtool.WaitFor(t, 20*time.Second, "b to deliver everything", func() bool { return q.left() == 0 })
	stop()
	if a.got.Load() != 0 || b.got.Load() != 200 {
		t.Fatalf("a %d b %d", a.got.Load(), b.got.Load())
	}

	// Every upstream down: nothing is acked, nothing is lost; when one
	// comes back, the backlog drains.
	q = newMemQueue(100)
	a = &fakeSender{name: "a", delay: time.Millisecond, batch: 10}
	b = &fakeSender{name: "b", delay: time.Millisecond, batch: 10}
	a.down.Store(true)
	b.down.Store(true)
	_, stop = newLoop(t, q, "p2c_ewma", a, b)
	time.Sleep(200 * time.Millisecond)
	if q.left() != 100 || len(q.acked) != 0 {
		t.Fatalf("delivered while every upstream was down: left %d", q.left())
	}
	b.down.Store(false)
	testtool.WaitFor(t, 20*time.Second, "the backlog to drain after recovery", func() bool { return q.left() == 0 })
	stop()
	if b.got.Load() != 100 {
		t.Fatalf("b delivered %d", b.got.Load())
	}
}

func TestDeliveryDeadLettersOnlyThePoisonPacket(t *testing.T) {
	q := newMemQueue(50, 17)
	h := &fakeSender{name: "http", delay: time.Millisecond, batch: 10}
	d, stop := newLoop(t, q, "round_robin", h)
	testtool.WaitFor(t, 20*time.Second, "the queue to settle", func() bool { return q.left() == 0 })
	stop()
	if len(q.dead) != 1 || q.dead[17] == "" || len(q.acked) != 49 {
		t.Fatalf("dead %v, acked %d", q.dead, len(q.acked))
	}
	if d.Stats().DeadLettered != 1 {
		t.Fatalf("stats %+v", d.Stats())
	}
}

func TestDeliveryStopsWithoutLosingInFlight(t *testing.T) {
	q := newMemQueue(40)
	slow := &fakeSender{name: "slow", delay: 300 * time.Millisecond, batch: 1}
	_, stop := newLoop(t, q, "round_robin", slow)
	testtool.WaitFor(t, 10*time.Second, "a send to be in flight", func() bool { return slow.calls.Load() > 0 })
	stop() // in-flight sends finish (they are given their timeout, not the loop's life)
	q.mu.Lock()
	defer q.mu.Unlock()
	if len(q.leased) != 0 {
		t.Fatalf("%d records still leased after Run returned", len(q.leased))
	}
	if slow.got.Load() == 0 {
		t.Fatalf("the send in flight at the stop was cut short instead of finishing")
	}
	if int(slow.got.Load()) != len(q.acked) || len(q.acked)+len(q.recs) != 40 {
		t.Fatalf("sent %d, acked %d, left %d", slow.got.Load(), len(q.acked), len(q.recs))
	}
}
func TestDeliveryRestsAFailingUpstream(t *testing.T) {
	q := newMemQueue(100)
	a := &fakeSender{name: "a", batch: 1}
	a.fail.Store(true)
	table := selector.NewTable(selector.Options{Seed: 1})
	strat, _ := selector.New("round_robin", selector.StrategyOptions{})
	d := NewDelivery(q, table, strat, DeliveryOptions{DeadLetters: q, Backoff: time.Second})
	idx, err := table.Add(a.name, 1)
	if err != nil {
		t.Fatal(err)
	}
	d.Add(idx, a)
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan struct{})
	go func() { defer close(done); d.Run(ctx) }()
	time.Sleep(1500 * time.Millisecond)
	// Rests of about 100, 200, 400, 800 ms: a handful of rounds of at most
	// a window of sends each. Without rests: tens of thousands.
	if n := a.calls.Load(); n > 100 {
		t.Errorf("a failing upstream was tried %d times in 1.5 s", n)
	}
	a.fail.Store(false)
	testtool.WaitFor(t, 20*time.Second, "the backlog to drain once it accepts", func() bool { return q.left() == 0 })
	cancel()
	<-done
	t.Logf("%d sends to the failing upstream in 1.5 s", a.calls.Load())
}

// TestDeliveryShutdownWhileHTTPRefusesReturns pins a hang: a batch that the
// upstream refuses (422) while the loop stops is resent one record at a
// time; a record sent without a window place taken must not give one back,
// or the window over-fills and Run never returns. Whatever happens, no
// record is lost: each is dead-lettered or still in the buffer.
func TestDeliveryShutdownWhileHTTPRefusesReturns(t *testing.T) {
	arrived := make(chan struct{}, 1)
	answer := make(chan struct{})
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		_, _ = io.Copy(io.Discard, r.Body)
		select {
		case arrived <- struct{}{}:
		default:
		}
		<-answer
		http.Error(w, `{"error":"unprocessable"}`, http.StatusUnprocessableEntity)
	}))
	var once sync.Once
	open := func() { once.Do(func() { close(answer) }) }
	t.Cleanup(srv.Close)
	t.Cleanup(open)

	const n = 60
	q := newMemQueue(n)
	d, _ := httpDelivery(t, q, srv.URL, 2)
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan struct{})
	go func() { defer close(done); d.Run(ctx) }()

	<-arrived // batches are in flight
	cancel()
	open() // every batch in flight is now refused
	select {
	case <-done:
	case <-time.After(10 * time.Second): // a hang detector, not a bound
		t.Fatal("Run did not return after its context ended")
	}
	q.mu.Lock()
	defer q.mu.Unlock()
	if len(q.leased) != 0 || len(q.acked) != 0 || len(q.dead)+len(q.recs) != n {
		t.Fatalf("after Run: %d leased, %d acked, %d dead-lettered, %d in the buffer; want 0, 0 and %d in all",
			len(q.leased), len(q.acked), len(q.dead), len(q.recs), n)
	}
}

// TestDeliveryHonoursRetryAfter: after a 429 or 503 with Retry-After the
// upstream gets no send before that time, capped at maxRetryAfter.
func TestDeliveryHonoursRetryAfter(t *testing.T) {
	for _, tc := range []struct {
		header string
		want   time.Duration
	}{
		{"120", 120 * time.Second},
		{"3600", maxRetryAfter},
	} {
		t.Run(tc.header, func(t *testing.T) {
			var answered atomic.Int64 // Unix ns of the 429
			srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
				_, _ = io.Copy(io.Discard, r.Body)
				answered.CompareAndSwap(0, time.Now().UnixNano())
				w.Header().Set("Retry-After", tc.header)
				w.WriteHeader(http.StatusTooManyRequests)
			}))
			t.Cleanup(srv.Close)
			q := newMemQueue(5)
			d, idx := httpDelivery(t, q, srv.URL, 1)
			ctx, cancel := context.WithCancel(context.Background())
			done := make(chan struct{})
			go func() { defer close(done); d.Run(ctx) }()
			defer func() { cancel(); <-done }()
			testtool.WaitFor(t, 20*time.Second, "the refused batch back in the buffer", func() bool { return d.Stats().Released >= 5 })
			now := time.Now().UnixNano()
			until := d.slot(idx).coolUntil.Load()
			if min := answered.Load() + int64(tc.want); until < min {
				t.Errorf("the upstream rests until %v after the 429, want at least %v",
					time.Duration(until-answered.Load()), tc.want)
			}
			if until > now+int64(maxRetryAfter) {
				t.Errorf("the upstream rests %v from now, more than the cap %v", time.Duration(until-now), maxRetryAfter)
			}
		})
	}
}

// httpDelivery is a round-robin delivery loop over q to one HTTP upstream
// at url (batches of 10, the given window), dead letters into q; it returns
// the loop and the upstream's index.
func httpDelivery(t *testing.T, q *memQueue, url string, window int) (*Delivery, int) {
	t.Helper()
	table := selector.NewTable(selector.Options{Seed: 1})
	strat, err := selector.New("round_robin", selector.StrategyOptions{})
	if err != nil {
		t.Fatal(err)
	}
	d := NewDelivery(q, table, strat, DeliveryOptions{DeadLetters: q, Backoff: 50 * time.Millisecond})
	hs := httpTestSender(t, url+"/ingest", 10, window)
	idx, err := table.Add(hs.Name(), 1)
	if err != nil {
		t.Fatal(err)
	}
	d.Add(idx, hs)
	return d, idx
}
