package loopback

import (
	"bytes"
	"context"
	"fmt"
	"io"
	"log/slog"
	"math"
	"net/http"
	"net/http/httptest"
	"path/filepath"
	"strconv"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"fieldlink/buffer"
	"fieldlink/internal/testtool/brokertest"
	"fieldlink/packet"
	"fieldlink/selector"
	"fieldlink/uplink"
	_ "fieldlink/uplink/kinds"
)

// rig is a set of upstreams on loopback, each behind a toxiproxy proxy.
// The proxies outlive the blocks; each block has its own gateway side
// (buffer, table, strategy, senders), which dial makes per upstream.
type rig struct {
	t       *testing.T
	proxies []*brokertest.Proxy
	posts   atomic.Uint64 // batches the HTTP upstreams acked, all blocks
	sink    []atomic.Bool // HTTP upstream i answers 500 at once while sink[i] is set
	dir     string
	blocks  int
	dial    dialer
}

// dialer makes the gateway side of upstream i for one block: its sender
// and prober, as the gateway wires them. table is the block's table, in
// which i is the upstream's index.
type dialer func(r *rig, i int, table *selector.Table, epoch string, plan blockPlan) endpoint

// endpoint is the gateway side of one upstream in one block.
type endpoint struct {
	sender uplink.Sender
	prober *uplink.Prober
	run    func(ctx context.Context) // the connection's own loop, if it has one
	close  func()                    // after the block's goroutines have returned
}

// newRig starts n HTTP upstreams and their proxies, stopped when the test
// ends.
func newRig(t *testing.T, n int) *rig {
	t.Helper()
	r := &rig{t: t, dir: t.TempDir(), sink: make([]atomic.Bool, n), dial: dialHTTP}
	for i := range n {
		srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, req *http.Request) {
			if r.sink[i].Load() {
				http.Error(w, "sinkhole", http.StatusInternalServerError)
				return
			}
			if _, err := io.Copy(io.Discard, req.Body); err != nil {
				http.Error(w, err.Error(), http.StatusBadRequest)
				return
			}
			r.posts.Add(1)
			w.WriteHeader(http.StatusNoContent)
		}))
		t.Cleanup(srv.Close)
		r.proxy(i, srv.Listener.Addr().String()) // its Cleanup runs before srv.Close
	}
	return r
}

// proxy starts upstream i's proxy in front of addr, stopped when the test
// ends.
func (r *rig) proxy(i int, addr string) {
	r.t.Helper()
	r.proxies = append(r.proxies, brokertest.NewProxy(r.t, fmt.Sprintf("up%d", i), addr))
}

// dialHTTP is the gateway side of an HTTP upstream: the HTTP kind's sender with the
// gateway's default batch and window, and a TCP prober feeding Table.Probe
// and the sender's ProbeResult.
func dialHTTP(r *rig, i int, table *selector.Table, epoch string, plan blockPlan) endpoint {
	t := r.t
	t.Helper()
	p := r.proxies[i]
	// The gateway's defaults: batches of 50, window 64/8.
	hs, err := uplink.Open(uplink.UpstreamConfig{URL: "http://" + p.Addr() + "/ingest", Timeout: plan.timeout},
		uplink.PoolConfig{Batch: 50, Window: 64, GatewayID: "gw-loopback", Epoch: epoch})
	if err != nil {
		t.Fatal(err)
	}
	target, err := uplink.ProbeTarget("http://" + p.Addr())
	if err != nil {
		t.Fatal(err)
	}
	pr := uplink.NewProber(target, plan.probeEvery, 500*time.Millisecond, nil, func(rtt time.Duration, err error) {
		table.Probe(i, rtt, err)
		hs.ProbeResult(err)
	})
	return endpoint{sender: hs.Sender, prober: pr, close: func() { hs.Close() }}
}

// setLatency makes upstream i answer d late (toxiproxy's latency toxic on
// the downstream direction); 0 removes it.
func (r *rig) setLatency(i int, d time.Duration) {
	p := r.proxies[i]
	p.Reset()
	if d > 0 {
		p.AddToxic(fmt.Sprintf(`{"name":"rtt","type":"latency","stream":"downstream","attributes":{"latency":%d}}`, d.Milliseconds()))
	}
}

// setBlackHole makes upstream i's proxy accept and never answer (the
// timeout toxic with timeout 0 drops every byte upstream, on open
// connections too, and closes none), or answer again.
func (r *rig) setBlackHole(i int, on bool) {
	if on {
		r.proxies[i].AddToxic(`{"name":"hole","type":"timeout","stream":"upstream","attributes":{"timeout":0}}`)
	} else {
		r.proxies[i].RemoveToxic("hole")
	}
}

// setDown stops (connections refused) or restarts upstream i's proxy, on
// the same port.
func (r *rig) setDown(i int, down bool) {
	if down {
		r.proxies[i].Down()
	} else {
		r.proxies[i].Up()
	}
}

// blockPlan is one block's timing: arrivals at rate from 0 to
// warmup+fault, the fault from warmup to warmup+fault, then up to drain
// for the last packets.
type blockPlan struct {
	rate          float64 // packets per second
	warmup, fault time.Duration
	drain         time.Duration
	// after: arrivals go on this long past the fault, which ends on time
	// (else it ends after the drain).
	after      time.Duration
	probeEvery time.Duration
	timeout    time.Duration // of one HTTP post (UpstreamConfig.Timeout), or of an MQTT PUBACK
	// publishProbe probes a broker with a QoS 1 publish timed to its
	// PUBACK (the MQTT kind's Conn.NewProber) rather than a TCP connect.
	publishProbe bool
	// drf, if set, are the options of drf_cswlc instead of its defaults.
	drf *selector.DRFCSWLCOptions
}

// arrivals is how many packets the block offers.
func (p blockPlan) arrivals() int {
	return int(math.Ceil(float64(p.warmup+p.fault+p.after) / float64(p.gap())))
}

func (p blockPlan) gap() time.Duration { return time.Duration(float64(time.Second) / p.rate) }

// blockResult is what one block measured.
type blockResult struct {
	lat        []time.Duration // of the packets that arrived in the fault window, in arrival order
	appendLag  []time.Duration // of the same packets: from intended arrival to stored in the buffer
	lost       int             // of which not acked before the drain ended (lat is the censored time)
	faultPicks int             // sends started in the fault window
	faultyHits int             // of which to the faulty upstream
	sends      int             // every send of the block
	failed     int             // sends that failed
	trace      []sendAt        // every send, in order
	from, to   time.Duration   // the fault window, from the block's start
	// binPicks and binHits split faultPicks and faultyHits over joinBins
	// equal parts of the fault window: the joiner's share as it ramps up.
	binPicks, binHits [joinBins]int
}

// joinBins is how many parts of the fault window the joiner's share is
// measured over: the lab's S7 takes its peak over the five 1 s bins after
// the join.
const joinBins = 5

// meter records, for one block, each packet's latency from its intended
// arrival (start + k·gap) to the first ack of it, and the sends made in the
// fault window.
type meter struct {
	start      time.Time
	gap        time.Duration
	from, to   time.Time // the fault window
	faulty     int
	lat        []atomic.Int64 // ns, 0 until acked
	acked      atomic.Int64
	all        chan struct{} // closed when every packet has been acked
	sends      atomic.Int64
	failed     atomic.Int64
	faultPicks atomic.Int64
	faultyHits atomic.Int64
	traceMu    sync.Mutex
	trace      []sendAt // every send of the block
	binPicks   [joinBins]atomic.Int64
	binHits    [joinBins]atomic.Int64
}

// sendAt is one send: when, from the block's start, and to which upstream.
type sendAt struct {
	at  time.Duration
	idx int
}

func (m *meter) intended(k int) time.Time { return m.start.Add(time.Duration(k) * m.gap) }

// meteredSender is a Sender of the uplink, measured by m.
type meteredSender struct {
	uplink.Sender
	idx int
	m   *meter
}

// deviceKey precedes a packet's arrival number in its JSON.
var deviceKey = []byte(`"DeviceId":"k`)

// arrival returns the arrival number k that the packet's DeviceId "k<k>"
// carries, or -1.
func arrival(data []byte) int {
	i := bytes.Index(data, deviceKey)
	if i < 0 {
		return -1
	}
	rest := data[i+len(deviceKey):]
	j := bytes.IndexByte(rest, '"')
	if j < 0 {
		return -1
	}
	k, err := strconv.Atoi(string(rest[:j]))
	if err != nil {
		return -1
	}
	return k
}

func (s *meteredSender) Send(ctx context.Context, batch []buffer.Record) error {
	m := s.m
	now := time.Now()
	m.sends.Add(1)
	m.traceMu.Lock()
	m.trace = append(m.trace, sendAt{now.Sub(m.start), s.idx})
	m.traceMu.Unlock()
	if !now.Before(m.from) && now.Before(m.to) {
		m.faultPicks.Add(1)
		bin := min(int(int64(joinBins)*int64(now.Sub(m.from))/int64(m.to.Sub(m.from))), joinBins-1)
		m.binPicks[bin].Add(1)
		if s.idx == m.faulty {
			m.faultyHits.Add(1)
			m.binHits[bin].Add(1)
		}
	}
	err := s.Sender.Send(ctx, batch)
	if err != nil {
		m.failed.Add(1)
		return err
	}
	done := time.Now()
	for _, r := range batch {
		k := arrival(r.Data)
		if k < 0 || k >= len(m.lat) {
			continue
		}
		ns := max(int64(done.Sub(m.intended(k))), 1)
		if m.lat[k].CompareAndSwap(0, ns) && m.acked.Add(1) == int64(len(m.lat)) {
			close(m.all)
		}
	}
	return nil
}

// fault is what a scenario does to the rig while its fault lasts.
type fault func(r *rig, on bool)

// runBlock runs strategy over the rig for one block of sc: base round
// trips, warm-up, fault, drain. In a join scenario the faulty upstream is
// the joiner: it enters the table and the delivery (Table.Add, then
// Delivery.Add, as the registry does) when the fault starts.
func (r *rig) runBlock(strategy string, sc scenario, plan blockPlan) blockResult {
	t := r.t
	t.Helper()
	for i, d := range sc.base {
		r.setLatency(i, d)
	}
	r.blocks++
	buf, err := buffer.Open(filepath.Join(r.dir, fmt.Sprintf("block%d", r.blocks), "buffer.db"),
		buffer.Options{Logger: slog.New(slog.DiscardHandler)})
	if err != nil {
		t.Fatal(err)
	}
	defer func() {
		if err := buf.Close(); err != nil {
			t.Errorf("buffer close: %v", err)
		}
	}()

	table := selector.NewTable(selector.Options{})
	var opt selector.StrategyOptions
	if strategy == "drf_cswlc" {
		opt.DRFCSWLC = plan.drf // nil: the defaults
	}
	strat, err := selector.New(strategy, opt)
	if err != nil {
		t.Fatal(err)
	}
	n := plan.arrivals()
	m := &meter{gap: plan.gap(), faulty: sc.faulty, lat: make([]atomic.Int64, n), all: make(chan struct{})}
	d := uplink.NewDelivery(buf, table, strat, uplink.DeliveryOptions{DeadLetters: buf})

	ctx, cancel := context.WithCancel(context.Background())
	var (
		wg     sync.WaitGroup
		closes []func()
	)
	defer func() { // after wg.Wait: the delivery may send until it returns
		for _, c := range closes {
			c()
		}
	}()
	defer wg.Wait()
	defer cancel()
	// attach adds upstream i to the table and the delivery, with its prober.
	attach := func(i int) {
		idx, err := table.Add(r.proxies[i].Name(), 1)
		if err != nil || idx != i {
			t.Fatalf("table index %d (%v) for upstream %d", idx, err, i)
		}
		ep := r.dial(r, i, table, buf.Epoch(), plan)
		closes = append(closes, ep.close)
		if ep.run != nil {
			wg.Go(func() { ep.run(ctx) })
		}
		d.Add(idx, &meteredSender{Sender: ep.sender, idx: idx, m: m})
		wg.Go(func() { ep.prober.Run(ctx) })
	}
	for i := range r.proxies {
		if sc.join && i == sc.faulty {
			continue
		}
		attach(i)
	}
	wg.Go(func() { d.Run(ctx) })

	// Open-loop arrivals: every packet due is appended when due, however
	// far behind the uplink is; a late append counts in its latency.
	m.start = time.Now().Add(20 * time.Millisecond)
	m.from, m.to = m.start.Add(plan.warmup), m.start.Add(plan.warmup+plan.fault)
	faultOn, faultOff := false, false
	appended := make([]time.Duration, n)
	for k := 0; k < n; {
		now := time.Now()
		if !faultOn && !now.Before(m.from) {
			if sc.fault != nil {
				sc.fault(r, true)
			}
			if sc.join {
				attach(sc.faulty)
			}
			faultOn = true
		}
		if faultOn && !faultOff && plan.after > 0 && !now.Before(m.to) {
			if sc.fault != nil {
				sc.fault(r, false)
			}
			faultOff = true
		}
		var due []*packet.Packet
		first := k
		for ; k < n && !m.intended(k).After(now); k++ {
			due = append(due, &packet.Packet{At: now, SiteID: "001", DataType: "Rain", GatewayID: "gw-loopback",
				DeviceID: "k" + strconv.Itoa(k), Fields: []packet.Field{{Name: "Rain", Value: packet.Float(1.5, 1)}}})
		}
		if len(due) > 0 {
			if err := buf.AppendAll(ctx, due...); err != nil {
				t.Fatalf("append: %v", err)
			}
			stored := time.Now()
			for j := first; j < k; j++ {
				appended[j] = stored.Sub(m.intended(j))
			}
			continue
		}
		time.Sleep(time.Until(m.intended(k))) // pacing of the arrivals, not synchronisation
	}
	timer := time.NewTimer(time.Until(m.to.Add(plan.after)) + plan.drain)
	select {
	case <-m.all:
	case <-timer.C:
	}
	timer.Stop()
	end := time.Now()
	if sc.fault != nil && faultOn && !faultOff {
		sc.fault(r, false)
	}
	cancel()
	wg.Wait()

	res := blockResult{faultPicks: int(m.faultPicks.Load()), faultyHits: int(m.faultyHits.Load()),
		sends: int(m.sends.Load()), failed: int(m.failed.Load()),
		trace: m.trace, from: m.from.Sub(m.start), to: m.to.Sub(m.start)}
	for b := range joinBins {
		res.binPicks[b], res.binHits[b] = int(m.binPicks[b].Load()), int(m.binHits[b].Load())
	}
	for k := range n {
		at := m.intended(k)
		if at.Before(m.from) || !at.Before(m.to) {
			continue
		}
		ns := m.lat[k].Load()
		if ns == 0 {
			res.lost++
			ns = int64(end.Sub(at))
		}
		res.lat = append(res.lat, time.Duration(ns))
		res.appendLag = append(res.appendLag, appended[k])
	}
	return res
}
