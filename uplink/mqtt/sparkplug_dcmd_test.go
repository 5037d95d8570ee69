package mqtt

import (
	"context"
	"testing"
	"time"

	"fieldlink/sparkplug"
)

// A DCMD whose writes take long does not hold the node: a rebirth asked
// while it runs is answered at once (the session's loop, which does
// STATE, NCMD and births, never runs a DCMD).
func TestSparkplugDCMDOffTheSessionLoop(t *testing.T) {
	b := mqttStartBroker(t, mqttBrokerOpts{})
	rec := spRecord(t, b.Addr())
	entered, release := make(chan struct{}, 1), make(chan struct{})
	t.Cleanup(func() { close(release) })
	m, _, _ := spRun(t, b.URL(), SparkplugConfig{GroupID: "farm", EdgeNode: "gw1", Devices: spTestDevices,
		OnCommand: func(ctx context.Context, _ SparkplugCommand) {
			select {
			case entered <- struct{}{}:
			default:
			}
			select { // a write that hangs
			case <-release:
			case <-ctx.Done():
			}
		}})
	mqttWaitConnected(t, m, true)
	rec.wait(t, 3, "the births")
	host := mqttClient(t, b.Addr(), "host")
	send := func(topic string, p sparkplug.Payload) {
		t.Helper()
		if tok := host.Publish(topic, 1, false, p.Marshal()); !tok.WaitTimeout(5*time.Second) || tok.Error() != nil {
			t.Fatal(tok.Error())
		}
	}
	now := uint64(time.Now().UnixMilli())
	send("spBv1.0/farm/DCMD/gw1/rain-1", sparkplug.Payload{Timestamp: now, HasSeq: true,
		Metrics: []sparkplug.Metric{{Name: "Heater", Type: sparkplug.Boolean, Value: sparkplug.BoolOf(true)}}})
	select {
	case <-entered:
	case <-time.After(10 * time.Second):
		t.Fatal("the DCMD never reached OnCommand")
	}
	send("spBv1.0/farm/NCMD/gw1", sparkplug.Payload{Timestamp: now, HasSeq: true,
		Metrics: []sparkplug.Metric{{Name: sparkplug.Rebirth, Type: sparkplug.Boolean, Value: sparkplug.BoolOf(true)}}})
	rec.wait(t, 6, "the rebirth while a DCMD runs")
}
