package mqtt

import (
	"context"
	"errors"
	"fieldlink/uplink/mqtt/mqtttest"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"fieldlink/internal/testtool"
	"fieldlink/uplink"
	"fieldlink/uplink/internal/probe"
)

// An MQTT prober publishes on its topic while the connection is up (the
// broker's PUBACK ends it), and falls back to a TCP connect while it is
// down, so that a broker that answers again is seen.
func TestMQTTProber(t *testing.T) {
	b := mqtttest.Broker(t, mqtttest.BrokerOptions{})
	sub := mqtttest.Subscribe(t, b.Addr(), "fl/probe")
	m, stop := mqttRun(t, mqttConfig{URL: b.URL()})
	mqtttest.WaitConnected(t, m.Connected, true)
	p := newMQTTProber(m, "fl/probe", time.Second, 5*time.Second, nil)
	if rtt, err := p.Once(context.Background()); err != nil || rtt <= 0 {
		t.Fatalf("probe over the connection: %v, %v", rtt, err)
	}
	testtool.WaitFor(t, 10*time.Second, "the probe's publish reaches a subscriber", func() bool { return sub.Count() == 1 })

	stop()
	mqtttest.WaitConnected(t, m.Connected, false)
	if rtt, err := p.Once(context.Background()); err != nil || rtt <= 0 {
		t.Errorf("probe with the connection down, the broker up: %v, %v", rtt, err)
	}
	b.Kill()
	if _, err := p.Once(context.Background()); err == nil {
		t.Error("probe with the broker gone: no error")
	}
	if n := sub.Count(); n != 1 {
		t.Errorf("%d probe publishes reached the subscriber, want 1 (none while down)", n)
	}
}

// A broker that enforces its ACL by closing the connection of a client
// that publishes where it may not: the prober takes its topic for denied
// after two probes in a row lost the connection under them, says so once,
// and probes with TCP connects from then on, so that the probes stop
// costing the upstream its connection.
func TestMQTTProberDeniedFallsBackToTCP(t *testing.T) {
	b := mqtttest.Broker(t, mqtttest.BrokerOptions{})
	relay := mqttStartRelay(t, b.Addr())
	topic := "fl-probe/s1/gw1"
	relay.cutOn.Store(&topic)
	log, logBuf := mqtttest.Logger(t)
	m, _ := mqttRun(t, mqttConfig{URL: relay.url(), Logger: log})
	p := newMQTTProber(m, topic, time.Second, 5*time.Second, nil)
	for i := range probe.DeniedLosses {
		mqtttest.WaitConnected(t, m.Connected, true)
		if p.Denied() {
			t.Fatalf("denied after %d probes, want after %d", i, probe.DeniedLosses)
		}
		if _, err := p.Once(context.Background()); err == nil {
			t.Fatalf("probe %d: the relay closed the connection under it, yet no error", i+1)
		}
	}
	if !p.Denied() {
		t.Fatalf("not denied after %d probes that each lost the connection (%d cut)", probe.DeniedLosses, relay.cutsOnTopic.Load())
	}
	mqtttest.WaitConnected(t, m.Connected, true)
	for i := range 3 {
		if rtt, err := p.Once(context.Background()); err != nil || rtt <= 0 {
			t.Fatalf("probe %d after the fallback: %v, %v", i+1, rtt, err)
		}
	}
	if n := relay.cutsOnTopic.Load(); n != probe.DeniedLosses {
		t.Errorf("the probe topic cost %d connections, want %d", n, probe.DeniedLosses)
	}
	if !m.Connected() {
		t.Error("the connection went down after the fallback")
	}
	if n := strings.Count(logBuf.String(), "probe topic looks denied"); n != 1 {
		t.Errorf("the fallback said %d times in the log, want once", n)
	}
}

// One probe that loses its connection is not a denial: a broker may die
// under any publish. A success in between starts the count over.
func TestMQTTProberOneLossIsNotADenial(t *testing.T) {
	b := mqtttest.Broker(t, mqtttest.BrokerOptions{})
	relay := mqttStartRelay(t, b.Addr())
	topic := "fl-probe/s1/gw1"
	m, _ := mqttRun(t, mqttConfig{URL: relay.url()})
	p := newMQTTProber(m, topic, time.Second, 5*time.Second, nil)
	for range 2 * probe.DeniedLosses {
		mqtttest.WaitConnected(t, m.Connected, true)
		relay.cutOn.Store(&topic)
		if _, err := p.Once(context.Background()); err == nil {
			t.Fatal("the relay closed the connection under the probe, yet no error")
		}
		relay.cutOn.Store(nil)
		mqtttest.WaitConnected(t, m.Connected, true)
		if _, err := p.Once(context.Background()); err != nil {
			t.Fatalf("probe through a healthy link: %v", err)
		}
	}
	if p.Denied() {
		t.Error("denied, though no two probes in a row lost the connection")
	}
}

// A publish probe that failed, or answered far slower than the best so
// far, says the broker is in trouble; small swings do not.
func TestProberTroubled(t *testing.T) {
	p := &uplink.Prober{}
	for i, c := range []struct {
		rtt  time.Duration
		err  error
		want bool
	}{
		{2 * time.Millisecond, nil, false},
		{5 * time.Millisecond, nil, false}, // 2.5× the best: a swing
		{1200 * time.Millisecond, nil, true},
		{150 * time.Millisecond, nil, true}, // past 4× and 100 ms more
		{0, errors.New("no PUBACK"), true},
		{90 * time.Millisecond, nil, false}, // within 100 ms of the best
		{time.Millisecond, nil, false},      // a new best
		{80 * time.Millisecond, nil, false},
		{120 * time.Millisecond, nil, true},
	} {
		if got := p.Troubled(c.rtt, c.err); got != c.want {
			t.Errorf("%d: %v, %v: troubled %v, want %v", i, c.rtt, c.err, got, c.want)
		}
	}
}

// While a broker's acks do not come, its publish probe runs again soon,
// not an interval later, so that its recovery is seen at once.
func TestMQTTProberProbesATroubledBrokerOften(t *testing.T) {
	b := mqtttest.Broker(t, mqtttest.BrokerOptions{})
	relay := mqttStartRelay(t, b.Addr())
	m, _ := mqttRun(t, mqttConfig{URL: relay.url()})
	mqtttest.WaitConnected(t, m.Connected, true)
	var failed, ok atomic.Int64
	p := newMQTTProber(m, "fl-probe/s1/gw1", time.Hour, 100*time.Millisecond, func(_ time.Duration, err error) {
		if err != nil {
			failed.Add(1)
		} else {
			ok.Add(1)
		}
	})
	p.TroubledEvery = 20 * time.Millisecond
	relay.swallow.Store(true)
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan struct{})
	go func() { defer close(done); p.Run(ctx) }()
	defer func() { cancel(); <-done }()
	testtool.WaitFor(t, 10*time.Second, "three failed probes, an hour's interval notwithstanding", func() bool { return failed.Load() >= 3 })
	relay.swallow.Store(false)
	testtool.WaitFor(t, 10*time.Second, "a probe answered once the acks come again", func() bool { return ok.Load() >= 1 })
}

// A prober finds its connection lost between probes and connects to the
// broker at once, then again after troubledEvery while the connects are
// refused, an hour's interval notwithstanding: a restarted broker is seen
// within troubledEvery of accepting connections.
func TestMQTTProberProbesALostBrokerOften(t *testing.T) {
	b := mqtttest.Broker(t, mqtttest.BrokerOptions{})
	relay := mqttStartRelay(t, b.Addr())
	m, _ := mqttRun(t, mqttConfig{URL: relay.url()})
	mqtttest.WaitConnected(t, m.Connected, true)
	var failed, ok atomic.Int64
	p := newMQTTProber(m, "fl-probe/s1/gw1", time.Hour, time.Second, func(_ time.Duration, err error) {
		if err != nil {
			failed.Add(1)
		} else {
			ok.Add(1)
		}
	})
	p.TroubledEvery = 20 * time.Millisecond
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan struct{})
	go func() { defer close(done); p.Run(ctx) }()
	defer func() { cancel(); <-done }()
	testtool.WaitFor(t, 10*time.Second, "the first probe answered", func() bool { return ok.Load() >= 1 })
	relay.close() // the connection lost, connects refused
	testtool.WaitFor(t, 10*time.Second, "three failed connects, an hour's interval notwithstanding", func() bool { return failed.Load() >= 3 })
}
