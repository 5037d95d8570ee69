package mqtt

import (
	"context"
	"fieldlink/uplink/mqtt/mqtttest"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"fieldlink/internal/testtool"
	"fieldlink/uplink"

	paho "github.com/eclipse/paho.mqtt.golang"
)

// The delivery figure: MQTT's publish through its window against paho alone
// with the same window of pipelined tokens, to a local mosquitto, the same
// ~200-byte payload, QoS 1. The ratio of their msgs/s has a target of 0.8
// or more. BenchmarkMQTTvsPahoQoS1 measures both on one broker in
// alternating rounds, so that the load of the machine weighs on both alike.

const (
	mqttBenchWindow = uplink.DefaultWindow
	mqttBenchTopic  = "fieldlink/s1/gw1/gas"
)

var mqttBenchPayload = []byte(`{"DataHead":{"Date":"2026-11-29","Time":"17:00:00","FarmId":"farm-7","DataType":"gas",` +
	`"GatewayId":"gw1","DeviceId":"ch4-1","Seq":123456,"TS":"2026-11-29T17:00:00Z"},` +
	`"DataBody":{"CH4":"0.42","CO":"3"` + strings.Repeat(" ", 5) + `}}`)

// mqttBenchOurs publishes n packets through m from Window goroutines.
func mqttBenchOurs(b *testing.B, m *mqttUpstream, n int) time.Duration {
	vars := map[string]string{"data_type": "gas", "device": "ch4-1"}
	var next atomic.Int64
	var wg sync.WaitGroup
	start := time.Now()
	for range mqttBenchWindow {
		wg.Go(func() {
			for next.Add(1) <= int64(n) {
				if err := m.publish(context.Background(), vars, mqttBenchPayload); err != nil {
					b.Error(err)
					return
				}
			}
		})
	}
	wg.Wait()
	return time.Since(start)
}

// mqttBenchRaw publishes n packets with paho alone, keeping a window of
// tokens in flight.
func mqttBenchRaw(b *testing.B, c paho.Client, n int) time.Duration {
	var ring [mqttBenchWindow]paho.Token
	start := time.Now()
	for i := range n {
		slot := &ring[i%mqttBenchWindow]
		if *slot != nil {
			if (*slot).Wait(); (*slot).Error() != nil {
				b.Fatal((*slot).Error())
			}
		}
		*slot = c.Publish(mqttBenchTopic, 1, false, mqttBenchPayload)
	}
	for _, tok := range ring {
		if tok != nil {
			if tok.Wait(); tok.Error() != nil {
				b.Fatal(tok.Error())
			}
		}
	}
	return time.Since(start)
}

func mqttBenchUpstream(b *testing.B, br *testtool.Mosquitto) *mqttUpstream {
	m, _ := mqttRun(b, mqttConfig{URL: br.URL(), Window: mqttBenchWindow})
	mqtttest.WaitConnected(b, m.Connected, true)
	return m
}

func mqttBenchPaho(b *testing.B, br *testtool.Mosquitto) paho.Client {
	o := paho.NewClientOptions().AddBroker("tcp://" + br.Addr()).SetClientID("bench-raw").
		SetCleanSession(true).SetAutoReconnect(false).SetProtocolVersion(4)
	c := paho.NewClient(o)
	if tok := c.Connect(); !tok.WaitTimeout(10*time.Second) || tok.Error() != nil {
		b.Fatalf("connect: %v", tok.Error())
	}
	b.Cleanup(func() { c.Disconnect(100) })
	return c
}

func BenchmarkMQTTPublishQoS1(b *testing.B) {
	m := mqttBenchUpstream(b, mqtttest.Broker(b, mqtttest.BrokerOptions{}))
	b.SetBytes(int64(len(mqttBenchPayload)))
	b.ResetTimer()
	d := mqttBenchOurs(b, m, b.N)
	b.ReportMetric(float64(b.N)/d.Seconds(), "msgs/s")
}

func BenchmarkPahoRawQoS1Pipelined(b *testing.B) {
	c := mqttBenchPaho(b, mqtttest.Broker(b, mqtttest.BrokerOptions{}))
	b.SetBytes(int64(len(mqttBenchPayload)))
	b.ResetTimer()
	d := mqttBenchRaw(b, c, b.N)
	b.ReportMetric(float64(b.N)/d.Seconds(), "msgs/s")
}

// BenchmarkMQTTvsPahoQoS1: b.N packets each way, in alternating rounds of
// 10,000, on one broker; reports both rates and their ratio.
func BenchmarkMQTTvsPahoQoS1(b *testing.B) {
	br := mqtttest.Broker(b, mqtttest.BrokerOptions{})
	m, c := mqttBenchUpstream(b, br), mqttBenchPaho(b, br)
	const round = 10000
	var ours, raw time.Duration
	b.ResetTimer()
	for done := 0; done < b.N; done += round {
		n := min(round, b.N-done)
		ours += mqttBenchOurs(b, m, n)
		raw += mqttBenchRaw(b, c, n)
	}
	b.ReportMetric(float64(b.N)/ours.Seconds(), "mqtt-msgs/s")
	b.ReportMetric(float64(b.N)/raw.Seconds(), "paho-msgs/s")
	b.ReportMetric(raw.Seconds()/ours.Seconds(), "ratio")
}
