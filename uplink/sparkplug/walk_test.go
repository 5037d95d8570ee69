package sparkplug

import (
	"context"
	"fieldlink/uplink/mqtt/mqtttest"
	"fmt"
	"testing"
	"time"

	"fieldlink/buffer"
	"fieldlink/internal/testtool"
	"fieldlink/packet"
	spb "fieldlink/sparkplug"
	"fieldlink/sparkplug/sparkplugtest"

	paho "github.com/eclipse/paho.mqtt.golang"
)

// spWalkNode runs a node whose servers are urls, the first first.
func spWalkNode(t *testing.T, urls []string, host string) (*node, func()) {
	t.Helper()
	log, _ := mqtttest.Logger(t)
	cfg := Config{GroupID: "farm", EdgeNode: "gw1", PrimaryHost: host, Devices: spTestDevices[1:]}
	for _, u := range urls[1:] {
		cfg.Servers = append(cfg.Servers, Server{URL: u})
	}
	c, sp := spOpen(t, log, urls[0], cfg, 4)
	return sp, mqtttest.Start(t, c.Run)
}

// births counts the NBIRTHs a proxy saw.
func (p *tckProxy) births() int {
	n := 0
	for _, pk := range p.packets() {
		if pk.typ == mqttPUBLISH && pk.topic == "spBv1.0/farm/NBIRTH/gw1" {
			n++
		}
	}
	return n
}

// subscribedTo reports whether the node subscribed to filter through p.
func (p *tckProxy) subscribedTo(filter string) bool {
	for _, pk := range p.packets() {
		if _, ok := pk.subs[filter]; ok && pk.typ == mqttSUBSCRIBE {
			return true
		}
	}
	return false
}

// TestTCK_walk: a node of three servers, the first refusing connections,
// the host online on the second and third. It walks past the first, is
// born on the second only, having subscribed there to the host's STATE;
// when the host's STATE there goes offline it publishes its NDEATH,
// disconnects, and is born on the third, where the data then goes; kept
// readings go out historical.
func TestTCK_walk(t *testing.T) {
	tahu := sparkplugtest.NewTahu(t)
	b2, b3 := mqtttest.Broker(t, mqtttest.BrokerOptions{}), mqtttest.Broker(t, mqtttest.BrokerOptions{})
	p2, p3 := newTCKProxy(t, b2.Addr()), newTCKProxy(t, b3.Addr())
	h2, h3 := mqtttest.Client(t, b2.Addr(), "scada"), mqtttest.Client(t, b3.Addr(), "scada")
	pub := func(c paho.Client, online bool, ts int64) {
		t.Helper()
		p := fmt.Sprintf(`{"online":%v,"timestamp":%d}`, online, ts)
		if tok := c.Publish("spBv1.0/STATE/scada", 1, true, p); !tok.WaitTimeout(5*time.Second) || tok.Error() != nil {
			t.Fatal(tok.Error())
		}
	}
	pub(h2, true, 100)
	pub(h3, true, 100)
	rec3 := spRecord(t, b3.Addr())
	sp, stop := spWalkNode(t, []string{"mqtt://" + testtool.RefusedAddr(t), p2.URL(), p3.URL()}, "scada")
	ctx := context.Background()

	t.Run("operational-behavior-primary-application-state-with-multiple-servers-state-subs", func(t *testing.T) {
		testtool.WaitFor(t, 15*time.Second, "the births on the second server", func() bool { return p2.births() >= 1 })
		if !p2.subscribedTo("spBv1.0/STATE/scada") {
			t.Error("no subscription to the host's STATE on the server the node is born on")
		}
	})
	testtool.WaitFor(t, 15*time.Second, "the sender up", sp.Up)
	at := time.Now().Add(-time.Minute).Truncate(time.Second)
	live := packet.Packet{At: at, DeviceID: "gas-1", Seq: 1, Fields: []packet.Field{{Name: "CH4", Value: packet.Float(1.5, 1)}}}
	if err := sp.Send(ctx, []buffer.Record{spRecordOf(t, &live)}); err != nil {
		t.Fatal(err)
	}

	t.Run("operational-behavior-primary-application-state-with-multiple-servers-single-server", func(t *testing.T) {
		if n := p3.births(); n != 0 {
			t.Errorf("%d NBIRTH on the third server while the node is born on the second", n)
		}
		for _, pk := range p3.packets() {
			if pk.typ == mqttCONNECT {
				t.Errorf("a CONNECT to the third server while the node is on the second")
				break
			}
		}
	})

	// The host leaves the second server.
	pub(h2, false, 200)
	kept := packet.Packet{At: at.Add(time.Second), DeviceID: "gas-1", Seq: 2, Fields: []packet.Field{{Name: "CH4", Value: packet.Float(2.5, 1)}}}
	t.Run("operational-behavior-primary-application-state-with-multiple-servers-walk", func(t *testing.T) {
		testtool.WaitFor(t, 15*time.Second, "the births on the third server", func() bool { return p3.births() >= 1 })
		// The node's PUBACK of a message the broker delivers (the host's
		// STATE) may go between its NDEATH and its DISCONNECT: the last
		// packets that are not such acks must be those two.
		var pk []tckPacket
		for _, x := range p2.packets() {
			if x.typ != mqttPUBACK {
				pk = append(pk, x)
			}
		}
		n := len(pk)
		if n < 2 || pk[n-1].typ != mqttDISCONNECT || pk[n-2].topic != "spBv1.0/farm/NDEATH/gw1" {
			t.Errorf("the second server's last packets are not the NDEATH and DISCONNECT")
		}
	})
	t.Run("operational-behavior-edge-node-termination-host-offline-reconnect", func(t *testing.T) {
		if p3.births() < 1 {
			t.Error("no session on the next server")
		}
	})
	testtool.WaitFor(t, 15*time.Second, "the sender up on the third server", sp.Up)
	if err := sp.Send(ctx, []buffer.Record{spRecordOf(t, &kept)}); err != nil {
		t.Fatal(err)
	}
	got := rec3.wait(t, 3, "NBIRTH, DBIRTH and the DDATA on the third server")
	t.Run("operational-behavior-edge-node-birth-sequence-wait", func(t *testing.T) {
		want := []string{spb.NBIRTH, spb.DBIRTH, spb.DDATA}
		for i, w := range want {
			if _, typ, _, _, err := spb.ParseTopic(got[i].topic); err != nil || typ != w {
				t.Errorf("message %d on the third server: %s, want %s", i, got[i].topic, w)
			}
		}
		d := tahu.Decode(t, got[2].payload)[0]
		if len(d.Metrics) == 0 || d.Metrics[0].IsHistorical == nil || !*d.Metrics[0].IsHistorical {
			t.Errorf("a reading made before the births on this server is not historical")
		}
	})
	stop()
}
