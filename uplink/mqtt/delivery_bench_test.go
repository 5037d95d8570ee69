package mqtt

import (
	"context"
	"fieldlink/uplink/mqtt/mqtttest"
	"fmt"
	"slices"
	"sync"
	"testing"
	"time"

	"fieldlink/buffer"
	"fieldlink/internal/testtool"
	"fieldlink/packet"
	"fieldlink/selector"
	"fieldlink/uplink"
)

// demoIngest is the demo site's sensor rate: 11 devices, about one packet
// per device per 1.5 s on average (see cmd/gateway/demo-*.yaml); the
// backlog figure is drain rate over this.
const demoIngest = 11.0 / 1.5

// fillBuffer opens a fresh buffer holding n packets.
func fillBuffer(b *testing.B, n int) *buffer.Buffer {
	q, err := buffer.Open(b.TempDir()+"/buf.db", buffer.Options{Durability: buffer.Interval, SyncEvery: 50 * time.Millisecond, MaxBytes: 1 << 30})
	if err != nil {
		b.Fatal(err)
	}
	b.Cleanup(func() { q.Close() })
	ps := make([]*packet.Packet, 0, 1000)
	for i := 0; i < n; i += len(ps) {
		ps = ps[:0]
		for k := 0; k < 1000 && i+k < n; k++ {
			ps = append(ps, &packet.Packet{At: time.Now(), IDField: "MineId", SiteID: "M1", GatewayID: "gw1", DeviceID: fmt.Sprint("ch4-", k%5),
				DataType: "Gas", Fields: []packet.Field{{Name: "CH4", Value: packet.Float(0.42, 2)}, {Name: "CO", Value: packet.Float(3, 0)}}})
		}
		if err := q.AppendAll(context.Background(), ps...); err != nil {
			b.Fatal(err)
		}
	}
	return q
}

// drain runs the delivery loop over q to m until q is empty.
func drain(b *testing.B, q *buffer.Buffer, m *mqttUpstream) time.Duration {
	table := selector.NewTable(selector.Options{})
	strat, _ := selector.New("p2c_ewma", selector.StrategyOptions{})
	d := uplink.NewDelivery(q, table, strat, uplink.DeliveryOptions{})
	idx, err := table.Add(m.Name(), 1)
	if err != nil {
		b.Fatal(err)
	}
	d.Add(idx, newMQTTSender(m, mqttBenchWindow))
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan struct{})
	start := time.Now()
	go func() { defer close(done); d.Run(ctx) }()
	for q.Len() > 0 {
		time.Sleep(time.Millisecond)
	}
	el := time.Since(start)
	cancel()
	<-done
	return el
}

// BenchmarkDeliveryLoopQoS1 is the whole delivery path, buffer → Lease →
// Pick → publish → PUBACK → Ack, to one local mosquitto at QoS 1, against
// paho alone publishing the same number of packets pipelined to the same
// broker in the same run. Reports both rates, their ratio (target ≥ 0.8)
// and the drain rate over the demo site's ingest rate (target ≥ 10).
func BenchmarkDeliveryLoopQoS1(b *testing.B) {
	br := mqtttest.Broker(b, mqtttest.BrokerOptions{})
	m, c := mqttBenchUpstream(b, br), mqttBenchPaho(b, br)
	n := max(b.N, 20000)
	var ours, raw time.Duration
	for range 2 {
		q := fillBuffer(b, n)
		b.StartTimer()
		ours += drain(b, q, m)
		raw += mqttBenchRaw(b, c, n)
		b.StopTimer()
	}
	rate := float64(2*n) / ours.Seconds()
	b.ReportMetric(rate, "loop-msgs/s")
	b.ReportMetric(float64(2*n)/raw.Seconds(), "paho-msgs/s")
	b.ReportMetric(raw.Seconds()/ours.Seconds(), "loop/paho")
	b.ReportMetric(rate/demoIngest, "drain/ingest")
}

// timedSender records, for every record it delivered, the time from its
// reading (Record.At: the poll) to the upstream's acknowledgement.
type timedSender struct {
	uplink.Sender
	mu  sync.Mutex
	lat []time.Duration
}

func (s *timedSender) Send(ctx context.Context, batch []buffer.Record) error {
	err := s.Sender.Send(ctx, batch)
	if err == nil {
		now := time.Now()
		s.mu.Lock()
		for _, r := range batch {
			s.lat = append(s.lat, now.Sub(r.At))
		}
		s.mu.Unlock()
	}
	return err
}

// BenchmarkPollToAck is the delay from a poll to the broker's PUBACK through
// the whole gateway path at 100 pkt/s, fsyncs included: every 100 ms ten
// packets (one poll cycle, each but the last saying More) go through the
// Appender into a buffer with the default durability (always, on the test's
// disk), and the delivery loop sends them at QoS 1 to a local mosquitto.
// One op is one cycle; reports p50 and p99 in ms (target p99 ≤ 20 ms), and
// the p99 of poll to stored alone (the buffer's share: its commits' fsyncs).
func BenchmarkPollToAck(b *testing.B) {
	br := mqtttest.Broker(b, mqtttest.BrokerOptions{})
	m := mqttBenchUpstream(b, br)
	q, err := buffer.Open(b.TempDir()+"/buf.db", buffer.Options{})
	if err != nil {
		b.Fatal(err)
	}
	defer q.Close()
	var smu sync.Mutex
	var stored []time.Duration // poll to stored (its commit's fsyncs done)
	a := buffer.NewAppender(q, buffer.AppenderOptions{OnStored: func(p *packet.Packet) {
		smu.Lock()
		stored = append(stored, time.Since(p.At))
		smu.Unlock()
	}})
	go a.Run()
	defer a.Close()
	table := selector.NewTable(selector.Options{})
	strat, _ := selector.New("p2c_ewma", selector.StrategyOptions{})
	d := uplink.NewDelivery(q, table, strat, uplink.DeliveryOptions{})
	idx, err := table.Add(m.Name(), 1)
	if err != nil {
		b.Fatal(err)
	}
	s := &timedSender{Sender: newMQTTSender(m, mqttBenchWindow)}
	d.Add(idx, s)
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan struct{})
	go func() { defer close(done); d.Run(ctx) }()
	defer func() { cancel(); <-done }()

	const devices, interval = 10, 100 * time.Millisecond
	tick := time.NewTicker(interval)
	defer tick.Stop()
	sent := 0
	for b.Loop() {
		<-tick.C
		for i := range devices {
			p := &packet.Packet{At: time.Now(), IDField: "FarmId", SiteID: "001", GatewayID: "gw1", DeviceID: fmt.Sprint("station-", i),
				DataType: "Agro", More: i < devices-1, Fields: make([]packet.Field, 100)}
			for k := range p.Fields {
				p.Fields[k] = packet.Field{Name: fmt.Sprint("Register", k), Value: packet.Float(21.5+float64(k), 1)}
			}
			a.Put(p)
		}
		sent += devices
	}
	b.StopTimer()
	testtool.Eventually(10*time.Second, 10*time.Millisecond, func() bool { // the figures below count what did not arrive
		s.mu.Lock()
		defer s.mu.Unlock()
		return len(s.lat) >= sent
	})
	s.mu.Lock()
	lat := slices.Clone(s.lat)
	s.mu.Unlock()
	if len(lat) < sent {
		b.Fatalf("%d of %d packets acknowledged", len(lat), sent)
	}
	pct := func(d []time.Duration, p float64) float64 {
		slices.Sort(d)
		return float64(d[int(p*float64(len(d)-1))]) / float64(time.Millisecond)
	}
	b.ReportMetric(pct(lat, 0.5), "p50-ms")
	b.ReportMetric(pct(lat, 0.99), "p99-ms")
	b.ReportMetric(pct(lat, 1), "max-ms")
	smu.Lock()
	defer smu.Unlock()
	b.ReportMetric(pct(stored, 0.99), "stored-p99-ms")
	b.ReportMetric(float64(q.Stats().Compactions), "compactions")
}
