package sparkplug

import (
	"context"
	"fieldlink/uplink/mqtt/mqtttest"
	"testing"
	"time"

	spb "fieldlink/sparkplug"
)

// A DCMD whose writes take long does not hold the node: a rebirth asked
// while it runs is answered at once (the session's loop, which does
// STATE, NCMD and births, never runs a DCMD).
func TestSparkplugDCMDOffTheSessionLoop(t *testing.T) {
	b := mqtttest.Broker(t, mqtttest.BrokerOptions{})
	rec := spRecord(t, b.Addr())
	entered, release := make(chan struct{}, 1), make(chan struct{})
	t.Cleanup(func() { close(release) })
	m, _, _ := spRun(t, b.URL(), Config{GroupID: "farm", EdgeNode: "gw1", Devices: spTestDevices,
		OnCommand: func(ctx context.Context, _ Command) {
			select {
			case entered <- struct{}{}:
			default:
			}
			select { // a write that hangs
			case <-release:
			case <-ctx.Done():
			}
		}})
	mqtttest.WaitConnected(t, m.Connected, true)
	rec.wait(t, 3, "the births")
	host := mqtttest.Client(t, b.Addr(), "host")
	send := func(topic string, p spb.Payload) {
		t.Helper()
		if tok := host.Publish(topic, 1, false, p.Marshal()); !tok.WaitTimeout(5*time.Second) || tok.Error() != nil {
			t.Fatal(tok.Error())
		}
	}
	now := uint64(time.Now().UnixMilli())
	send("spBv1.0/farm/DCMD/gw1/rain-1", spb.Payload{Timestamp: now, HasSeq: true,
		Metrics: []spb.Metric{{Name: "Heater", Type: spb.Boolean, Value: spb.BoolOf(true)}}})
	select {
	case <-entered:
	case <-time.After(10 * time.Second):
		t.Fatal("the DCMD never reached OnCommand")
	}
	send("spBv1.0/farm/NCMD/gw1", spb.Payload{Timestamp: now, HasSeq: true,
		Metrics: []spb.Metric{{Name: spb.Rebirth, Type: spb.Boolean, Value: spb.BoolOf(true)}}})
	rec.wait(t, 6, "the rebirth while a DCMD runs")
}
