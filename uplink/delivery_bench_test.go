package uplink

import (
	"context"
	"fmt"
	"testing"
	"time"

	"fieldlink/buffer"
	"fieldlink/packet"
	"fieldlink/selector"
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
func drain(b *testing.B, q *buffer.Buffer, m *MQTT) time.Duration {
	table := selector.NewTable(selector.Options{})
	strat, _ := selector.New("p2c_ewma", selector.StrategyOptions{})
	d := NewDelivery(q, table, strat, DeliveryOptions{})
	idx, err := table.Add(m.Name(), 1)
	if err != nil {
		b.Fatal(err)
	}
	d.Add(idx, NewMQTTSender(m, mqttBenchWindow))
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

// BenchmarkDeliveryLoopQoS1 is the whole delivery path, buffer → Next →
// Pick → Publish → PUBACK → Ack, to one local mosquitto at QoS 1, against
// paho alone publishing the same number of packets pipelined to the same
// broker in the same run. Reports both rates, their ratio (target ≥ 0.8)
// and the drain rate over the demo site's ingest rate (target ≥ 10).
func BenchmarkDeliveryLoopQoS1(b *testing.B) {
	br := mqttStartBroker(b, mqttBrokerOpts{})
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
