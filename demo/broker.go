package demo

import (
	"context"
	"encoding/json"
	"fmt"
	"io"
	"log/slog"
	"math"
	"net"
	"sync"
	"sync/atomic"
	"time"

	"fieldlink/packet"
)

// demoLoad is what a demo broker says about itself in its load reports
// (the JSON object uplink reads from an upstream's load URL or topic): a
// resting level that the packets it receives push up.
type demoLoad struct {
	CPU, Memory, DiskIO, Network float64
	Processes                    int
	CPUMHz, MemoryMB, Bandwidth  float64
}

// demoBrokerSpec is one of the demo's upstreams: a machine of some size at
// some distance.
type demoBrokerSpec struct {
	name  string
	delay time.Duration // added by the relay to everything the broker sends
	load  demoLoad
}

// The demo's three brokers: a fast idle one, a middling one and a slow busy
// one, so that the selector has something to learn.
var demoBrokers = []demoBrokerSpec{
	{"broker-1", 5 * time.Millisecond, demoLoad{CPU: 0.22, Memory: 0.35, DiskIO: 0.05, Network: 0.10, Processes: 142, CPUMHz: 3000, MemoryMB: 16384, Bandwidth: 1000}},
	{"broker-2", 40 * time.Millisecond, demoLoad{CPU: 0.45, Memory: 0.58, DiskIO: 0.15, Network: 0.22, Processes: 211, CPUMHz: 2400, MemoryMB: 8192, Bandwidth: 1000}},
	{"broker-3", 120 * time.Millisecond, demoLoad{CPU: 0.71, Memory: 0.77, DiskIO: 0.34, Network: 0.41, Processes: 318, CPUMHz: 1600, MemoryMB: 4096, Bandwidth: 100}},
}

// demoLedger is the platform behind the brokers: it counts the data packets
// the brokers took, by (GatewayId, Seq), so that the summary can say whether
// any was lost and how many came twice (delivery is at least once).
type demoLedger struct {
	mu   sync.Mutex
	seen map[demoKey]int
}

type demoKey struct {
	gateway string
	seq     uint64
}

// add records one data packet; it reports whether it is one.
func (l *demoLedger) add(payload []byte) bool {
	p, err := packet.Decode(payload)
	if err != nil || p.Seq == 0 {
		return false // the gateway's status messages share the topic tree
	}
	l.mu.Lock()
	defer l.mu.Unlock()
	if l.seen == nil {
		l.seen = map[demoKey]int{}
	}
	l.seen[demoKey{p.GatewayID, p.Seq}]++
	return true
}

// counts returns the distinct packets received and the duplicates.
func (l *demoLedger) counts() (distinct, dups int) {
	l.mu.Lock()
	defer l.mu.Unlock()
	for _, n := range l.seen {
		distinct++
		dups += n - 1
	}
	return distinct, dups
}

// demoServer is the MQTT broker inside a demo broker: it takes every
// client, acknowledges QoS 1 publishes, keeps retained messages and hands
// them to subscribers.
type demoServer interface {
	// addr is where it listens.
	addr() string
	// publishRetained publishes as the broker itself, retained.
	publishRetained(topic string, payload []byte) error
	// publish publishes as a client of the broker would (the platform).
	publish(topic string, payload []byte) error
	// clients is how many clients are connected.
	clients() int
	close()
}

// demoBroker is an embedded broker behind a latency relay; the gateway
// knows only the relay's address.
type demoBroker struct {
	demoBrokerSpec
	srv      demoServer
	relay    *demoRelay
	received atomic.Uint64 // data packets taken
	reports  atomic.Uint64 // load reports published
}

// url is the broker as the gateway's site config names it.
func (b *demoBroker) url() string { return "mqtt://" + b.relay.addr }

// loadTopic is where the broker publishes its retained load report.
func (b *demoBroker) loadTopic() string { return "$load/" + b.name }

// startDemoBroker starts a broker on a loopback port and its relay; both
// run until close. Its load reporter runs under ctx, owned by wg.
func startDemoBroker(ctx context.Context, wg *sync.WaitGroup, spec demoBrokerSpec, ledger *demoLedger, log *slog.Logger) (*demoBroker, error) {
	b := &demoBroker{demoBrokerSpec: spec}
	srv, err := newDemoServer(spec.name, log, func(payload []byte) {
		if ledger.add(payload) {
			b.received.Add(1)
		}
	})
	if err != nil {
		return nil, fmt.Errorf("demo: %s: %w", spec.name, err)
	}
	b.srv = srv
	b.relay = &demoRelay{target: srv.addr(), delay: spec.delay}
	if err := b.relay.up(); err != nil {
		srv.close()
		return nil, fmt.Errorf("demo: %s: %w", spec.name, err)
	}
	b.publishLoad(0, time.Now())
	wg.Go(func() { b.reportLoad(ctx) })
	return b, nil
}

// reportLoad publishes a retained load report every second until ctx ends.
func (b *demoBroker) reportLoad(ctx context.Context) {
	t := time.NewTicker(time.Second)
	defer t.Stop()
	last, lastAt := b.received.Load(), time.Now()
	for {
		select {
		case <-ctx.Done():
			return
		case now := <-t.C:
			n := b.received.Load()
			rate := float64(n-last) / now.Sub(lastAt).Seconds()
			last, lastAt = n, now
			b.publishLoad(rate, now)
		}
	}
}

// publishLoad publishes one report: the resting load, a slow wobble, and
// the work of rate packets a second.
func (b *demoBroker) publishLoad(rate float64, now time.Time) {
	l := b.load
	wobble := 0.04 * math.Sin(float64(now.UnixMilli())/7000+float64(len(b.name)+int(b.delay/time.Millisecond)))
	frac := func(v float64) float64 { return math.Round(min(max(v, 0), 0.99)*1000) / 1000 }
	report := map[string]any{
		"cpu":            frac(l.CPU + wobble + 0.015*rate),
		"memory":         frac(l.Memory + wobble/4),
		"disk_io":        frac(l.DiskIO + 0.005*rate),
		"network":        frac(l.Network + 0.01*rate),
		"processes":      l.Processes,
		"connections":    b.srv.clients(),
		"cpu_mhz":        l.CPUMHz,
		"memory_mb":      l.MemoryMB,
		"bandwidth_mbps": l.Bandwidth,
		"ts":             now.UTC().Format(time.RFC3339Nano),
	}
	data, _ := json.Marshal(report)
	if b.srv.publishRetained(b.loadTopic(), data) == nil {
		b.reports.Add(1)
	}
}

// close stops the relay and the broker.
func (b *demoBroker) close() {
	b.relay.close()
	b.srv.close()
}

// demoRelay is a TCP relay in front of a broker that holds back every byte
// the broker sends for delay (so a publish's PUBACK comes delay later, as
// from a distant server), and that can be taken down (its listener closed,
// its connections cut: new ones are refused) and brought up again on the
// same address.
type demoRelay struct {
	target string        // the broker's own address
	delay  time.Duration // added to the broker → client direction
	addr   string        // the relay's address, fixed by the first up

	mu    sync.Mutex
	ln    net.Listener // nil while down
	conns map[net.Conn]struct{}
	wg    sync.WaitGroup // accept loops and connections
}

// up listens (again) on the relay's address.
func (r *demoRelay) up() error {
	r.mu.Lock()
	defer r.mu.Unlock()
	if r.ln != nil {
		return nil
	}
	addr := r.addr
	if addr == "" {
		addr = "127.0.0.1:0"
	}
	ln, err := net.Listen("tcp", addr)
	if err != nil {
		return fmt.Errorf("relay: %w", err)
	}
	r.ln = ln
	if r.addr == "" {
		// Set once, at the first up, before anything reads it without
		// the lock (the live view): later ups listen on the same address.
		r.addr = ln.Addr().String()
	}
	r.wg.Go(func() { r.accept(ln) })
	return nil
}

// isUp reports whether the relay is listening.
func (r *demoRelay) isUp() bool {
	r.mu.Lock()
	defer r.mu.Unlock()
	return r.ln != nil
}

// down closes the listener and every connection.
func (r *demoRelay) down() {
	r.mu.Lock()
	defer r.mu.Unlock()
	if r.ln == nil {
		return
	}
	_ = r.ln.Close()
	r.ln = nil
	for c := range r.conns {
		_ = c.Close()
	}
	clear(r.conns)
}

// close takes the relay down and waits for its goroutines.
func (r *demoRelay) close() {
	r.down()
	r.wg.Wait()
}

// track registers c, a connection made under ln; it reports false (and c
// must be closed) when the relay went down since.
func (r *demoRelay) track(ln net.Listener, c net.Conn) bool {
	r.mu.Lock()
	defer r.mu.Unlock()
	if r.ln != ln {
		return false
	}
	if r.conns == nil {
		r.conns = map[net.Conn]struct{}{}
	}
	r.conns[c] = struct{}{}
	return true
}

func (r *demoRelay) untrack(c net.Conn) {
	r.mu.Lock()
	defer r.mu.Unlock()
	delete(r.conns, c)
}

func (r *demoRelay) accept(ln net.Listener) {
	for {
		c, err := ln.Accept()
		if err != nil {
			return
		}
		if !r.track(ln, c) {
			_ = c.Close()
			continue
		}
		r.wg.Go(func() { r.serve(ln, c) })
	}
}

// serve relays one client connection until either side closes it.
func (r *demoRelay) serve(ln net.Listener, client net.Conn) {
	defer r.untrack(client)
	defer client.Close()
	broker, err := net.DialTimeout("tcp", r.target, 2*time.Second)
	if err != nil {
		return
	}
	defer broker.Close()
	if !r.track(ln, broker) {
		return
	}
	defer r.untrack(broker)
	var once sync.Once
	cut := func() {
		once.Do(func() {
			_ = client.Close()
			_ = broker.Close()
		})
	}
	var wg sync.WaitGroup
	wg.Go(func() {
		_, _ = io.Copy(broker, client)
		cut()
	})
	wg.Go(func() { demoDelayCopy(client, broker, r.delay, cut) })
	wg.Wait()
}

// demoDelayCopy copies src to dst, each chunk delay after it was read, until
// either fails; then it calls cut, which must make both fail.
func demoDelayCopy(dst io.Writer, src io.Reader, delay time.Duration, cut func()) {
	type chunk struct {
		due  time.Time
		data []byte
	}
	ch := make(chan chunk, 256)
	var wg sync.WaitGroup
	wg.Go(func() {
		defer close(ch)
		for {
			buf := make([]byte, 4096)
			n, err := src.Read(buf)
			if n > 0 {
				ch <- chunk{time.Now().Add(delay), buf[:n]}
			}
			if err != nil {
				return
			}
		}
	})
	for c := range ch {
		time.Sleep(time.Until(c.due))
		if _, err := dst.Write(c.data); err != nil {
			break
		}
	}
	cut()
	for range ch { // what the reader got before the cut
	}
	wg.Wait()
}
