package mqtt

import (
	"context"
	"fieldlink/uplink/mqtt/mqtttest"
	"fmt"
	"slices"
	"sync"
	"testing"
	"time"

	"fieldlink/internal/testtool"
	"fieldlink/uplink"
)

// Commands published on the command topic of a real mosquitto reach
// OnCommand; a retained one (kept by the broker through an outage) never
// does; results go out with PublishTo.
func TestMQTTCommandTopic(t *testing.T) {
	b := mqtttest.Broker(t, mqtttest.BrokerOptions{})
	var mu sync.Mutex
	var got []string
	pub := mqtttest.Client(t, b.Addr(), "platform")
	// Retained before the gateway connects: a command queued by the broker.
	if tok := pub.Publish("fieldlink/s1/gw1/cmd", 1, true, "stale"); !tok.WaitTimeout(5*time.Second) || tok.Error() != nil {
		t.Fatal(tok.Error())
	}
	m, _ := mqttRun(t, mqttConfig{URL: b.URL(), Subscriptions: []uplink.Subscription{{Topic: "fieldlink/{site}/{gateway}/cmd", Handle: func(p []byte) {
		mu.Lock()
		got = append(got, string(p))
		mu.Unlock()
	}}}})
	mqtttest.WaitConnected(t, m.Connected, true)
	results := mqtttest.Subscribe(t, b.Addr(), "fieldlink/s1/gw1/cmd/result")
	if tok := pub.Publish("fieldlink/s1/gw1/cmd", 1, false, "live"); !tok.WaitTimeout(5*time.Second) || tok.Error() != nil {
		t.Fatal(tok.Error())
	}
	testtool.WaitFor(t, 10*time.Second, "the live command", func() bool {
		mu.Lock()
		defer mu.Unlock()
		return len(got) > 0
	})
	if err := m.PublishTo(context.Background(), "fieldlink/s1/gw1/cmd/result", []byte("done"), false); err != nil {
		t.Fatal(err)
	}
	testtool.WaitFor(t, 10*time.Second, "the result", func() bool { return results.Has("done") })
	mu.Lock()
	defer mu.Unlock()
	if len(got) != 1 || got[0] != "live" {
		t.Errorf("OnCommand got %q, want only the live command", got)
	}
}

func TestMQTTSubscriptionConfig(t *testing.T) {
	for _, cfg := range []mqttConfig{
		{URL: "mqtt://h", Subscriptions: []uplink.Subscription{{Topic: "a/b"}}},
		{URL: "mqtt://h", Subscriptions: []uplink.Subscription{{Topic: "", Handle: func([]byte) {}}}},
		{URL: "mqtt://h", Subscriptions: []uplink.Subscription{{Topic: "a/+/b", Handle: func([]byte) {}}}},
		{URL: "mqtt://h", Subscriptions: []uplink.Subscription{{Topic: "a/{nope}", Handle: func([]byte) {}}}},
	} {
		cfg.Vars = map[string]string{"site": "s", "gateway": "g"}
		if _, err := newMQTT(cfg); err == nil {
			t.Errorf("%+v: accepted", cfg)
		}
	}
}

// Through a real mosquitto, a burst of messages Admit refuses, with one it
// admits in the middle, while the handler is busy: the admitted one is
// handled first, the others only as far as their queue has room, and
// those refused and dropped are counted.
func TestMQTTAdmittedQueue(t *testing.T) {
	b := mqtttest.Broker(t, mqtttest.BrokerOptions{})
	busy := make(chan struct{})
	var once sync.Once
	release := func() { once.Do(func() { close(busy) }) }
	t.Cleanup(release)
	var mu sync.Mutex
	var got []string
	m, _ := mqttRun(t, mqttConfig{URL: b.URL(), Subscriptions: []uplink.Subscription{{Topic: "fieldlink/{site}/{gateway}/cmd",
		Admit: func(p []byte) bool { return string(p) == "signed" },
		Handle: func(p []byte) {
			<-busy
			mu.Lock()
			got = append(got, string(p))
			mu.Unlock()
		}}}})
	mqtttest.WaitConnected(t, m.Connected, true)
	pub := mqtttest.Client(t, b.Addr(), "platform")
	const burst = 1000
	for i := range burst {
		p := fmt.Sprintf("forged-%d", i)
		if i == burst/2 {
			p = "signed"
		}
		if tok := pub.Publish("fieldlink/s1/gw1/cmd", 1, false, p); !tok.WaitTimeout(5*time.Second) || tok.Error() != nil {
			t.Fatal(tok.Error())
		}
	}
	testtool.WaitFor(t, 10*time.Second, "the burst counted", func() bool {
		st := m.Inbound()
		return st.NotAdmitted == burst-1
	})
	release()
	testtool.WaitFor(t, 10*time.Second, "the signed message handled", func() bool {
		mu.Lock()
		defer mu.Unlock()
		return slices.Contains(got, "signed")
	})
	st := m.Inbound()
	if st.Dropped < burst-1-2*subscriptionQueue {
		t.Errorf("Inbound() = %+v: want at least %d dropped", st, burst-1-2*subscriptionQueue)
	}
	mu.Lock()
	defer mu.Unlock()
	if i := slices.Index(got, "signed"); i > 1 {
		t.Errorf("the signed message was handled %dth, after %q", i+1, got[:i])
	}
}
