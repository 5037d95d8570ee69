package mqtt

import (
	"context"
	"errors"
	"fieldlink/uplink/mqtt/mqtttest"
	"fmt"
	"runtime"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"fieldlink/internal/testtool"
)

func TestMQTTPublishWithoutRunFailsAtOnce(t *testing.T) {
	// An hour's publish timeout: a publish that waited for it instead of
	// failing at once would hang the test.
	m, err := newMQTT(mqttConfig{URL: "mqtt://127.0.0.1:1", Vars: mqttVars, PublishTimeout: time.Hour})
	if err != nil {
		t.Fatal(err)
	}
	err = m.publish(context.Background(), map[string]string{"data_type": "x"}, []byte("p"))
	if !errors.Is(err, errMQTTNotConnected) {
		t.Fatalf("Publish = %v, want ErrMQTTNotConnected", err)
	}
	if m.Connected() {
		t.Fatal("Connected() before Run")
	}
}

// TestMQTTPipelined publishes 2,000 packets at QoS 1 from 100 goroutines
// through a window of 64 and checks a subscriber gets every one.
func TestMQTTPipelined(t *testing.T) {
	b := mqtttest.Broker(t, mqtttest.BrokerOptions{})
	sub := mqtttest.Subscribe(t, b.Addr(), "fieldlink/s1/gw1/gas")
	m, _ := mqttRun(t, mqttConfig{URL: b.URL()})
	mqtttest.WaitConnected(t, m.Connected, true)

	const workers, each = 100, 20
	var wg sync.WaitGroup
	var failed atomic.Int64
	ctx := context.Background()
	start := time.Now()
	for w := range workers {
		wg.Go(func() {
			for i := range each {
				payload := fmt.Sprintf(`{"w":%d,"i":%d}`, w, i)
				dev := fmt.Sprintf("dev-%d", w%5)
				if err := m.publish(ctx, map[string]string{"data_type": "gas", "device": dev}, []byte(payload)); err != nil {
					failed.Add(1)
					t.Errorf("Publish %s: %v", payload, err)
				}
			}
		})
	}
	wg.Wait()
	t.Logf("2,000 QoS 1 publishes acknowledged in %v", time.Since(start))
	if failed.Load() > 0 {
		t.Fatalf("%d publishes failed", failed.Load())
	}
	testtool.WaitFor(t, 10*time.Second, "the subscriber to get 2,000 packets", func() bool { return sub.Count() >= workers*each })
	for w := range workers {
		for i := range each {
			if p := fmt.Sprintf(`{"w":%d,"i":%d}`, w, i); !sub.Has(p) {
				t.Fatalf("subscriber never got %s", p)
			}
		}
	}
	if c := m.cur.Load(); c == nil || len(c.slots) != 0 {
		t.Fatalf("window slots still taken after every Publish returned (connection %v)", c != nil)
	}
}

// TestMQTTNoPUBACKNoSuccess is the proof that a nil from publish means a
// PUBACK: a relay swallows everything the broker sends back, so the
// broker gets the packets (a subscriber sees them) but no PUBACK reaches
// the upstream; then the relay cuts the link. Every publish must fail, and
// quickly, not by timeout. It also checks the window: with Window 8, only
// 8 packets leave while no PUBACK comes back.
func TestMQTTNoPUBACKNoSuccess(t *testing.T) {
	b := mqtttest.Broker(t, mqtttest.BrokerOptions{})
	sub := mqtttest.Subscribe(t, b.Addr(), "fieldlink/s1/gw1/t")
	relay := mqttStartRelay(t, b.Addr())
	const window, n = 8, 20
	m, _ := mqttRun(t, mqttConfig{URL: relay.url(), Window: window, PublishTimeout: 30 * time.Second})
	mqtttest.WaitConnected(t, m.Connected, true)
	pubacksBefore := relay.pubacks.Load() // the status "online"

	relay.swallow.Store(true)
	type result struct {
		payload string
		err     error
	}
	results := make(chan result, n)
	for i := range n {
		go func() {
			p := fmt.Sprintf("packet-%d", i)
			results <- result{p, m.publish(context.Background(), map[string]string{"data_type": "t"}, []byte(p))}
		}()
	}
	testtool.WaitFor(t, 10*time.Second, "the broker to get a window of packets", func() bool { return sub.Count() >= window })
	time.Sleep(300 * time.Millisecond) // no more may leave while no PUBACK comes back
	if got := sub.Count(); got != window {
		t.Fatalf("%d packets reached the broker with no PUBACK back, want the window, %d", got, window)
	}
	select {
	case r := <-results:
		t.Fatalf("Publish(%s) returned %v while its PUBACK was swallowed", r.payload, r.err)
	default:
	}

	relay.refuse.Store(true) // no new connection: the rest fail as "not connected"
	cut := time.Now()
	relay.cut()
	inFlight := 0
	for range n {
		select {
		case r := <-results:
			if r.err == nil {
				t.Errorf("Publish(%s) = nil, but no PUBACK was ever delivered", r.payload)
				continue
			}
			if sub.Has(r.payload) {
				inFlight++
				if !errors.Is(r.err, errMQTTConnLost) {
					t.Errorf("Publish(%s) in flight at the cut = %v, want ErrMQTTConnLost", r.payload, r.err)
				}
			} else if !errors.Is(r.err, errMQTTNotConnected) && !errors.Is(r.err, errMQTTConnLost) {
				t.Errorf("Publish(%s) = %v", r.payload, r.err)
			}
		case <-time.After(5 * time.Second):
			t.Fatal("Publish still blocked 5s after the link was cut")
		}
	}
	t.Logf("all %d publishes failed %v after the cut (%d were in flight); PUBACKs swallowed: %d",
		n, time.Since(cut), inFlight, relay.swallowd.Load())
	if inFlight != window {
		t.Errorf("%d in flight at the cut, want %d", inFlight, window)
	}
	if got := relay.pubacks.Load(); got != pubacksBefore {
		t.Errorf("relay passed %d PUBACKs during the test", got-pubacksBefore)
	}
	mqtttest.WaitConnected(t, m.Connected, false)
}

// TestMQTTAckTimeout: when PUBACKs stop coming on a link that stays up,
// publish fails after PublishTimeout, the connection is made again, and
// publishing works on the new one.
func TestMQTTAckTimeout(t *testing.T) {
	b := mqtttest.Broker(t, mqtttest.BrokerOptions{})
	relay := mqttStartRelay(t, b.Addr())
	m, _ := mqttRun(t, mqttConfig{URL: relay.url(), PublishTimeout: 300 * time.Millisecond})
	mqtttest.WaitConnected(t, m.Connected, true)
	relay.swallow.Store(true)
	start := time.Now()
	err := m.publish(context.Background(), map[string]string{"data_type": "t"}, []byte("lost"))
	if !errors.Is(err, errMQTTAckTimeout) {
		t.Fatalf("Publish = %v, want ErrMQTTAckTimeout", err)
	}
	if d := time.Since(start); d < 250*time.Millisecond {
		t.Fatalf("timed out after %v, before its 300ms", d)
	}
	relay.swallow.Store(false)
	testtool.WaitFor(t, 10*time.Second, "a working new connection", func() bool {
		return m.publish(context.Background(), map[string]string{"data_type": "t"}, []byte("ok")) == nil
	})
}

// TestMQTTBrokerKilled kills mosquitto (SIGKILL) in the middle of a stream
// of pipelined publishes: every publish returns, none hangs, and no more
// of them return nil than PUBACKs reached the upstream.
func TestMQTTBrokerKilled(t *testing.T) {
	b := mqtttest.Broker(t, mqtttest.BrokerOptions{})
	relay := mqttStartRelay(t, b.Addr()) // only to count PUBACKs
	// PublishTimeout bounds how long paho may hold Run's pump after the loss.
	m, _ := mqttRun(t, mqttConfig{URL: relay.url(), PublishTimeout: 2 * time.Second})
	mqtttest.WaitConnected(t, m.Connected, true)
	base := relay.pubacks.Load()

	var acked, lost, notConn atomic.Int64
	var wg sync.WaitGroup
	for w := range 32 {
		wg.Go(func() {
			for i := 0; i < 100000; i++ {
				err := m.publish(context.Background(), map[string]string{"data_type": "k"}, fmt.Appendf(nil, "%d-%d", w, i))
				switch {
				case err == nil:
					acked.Add(1)
					continue
				case errors.Is(err, errMQTTConnLost):
					lost.Add(1)
				case errors.Is(err, errMQTTNotConnected):
					notConn.Add(1)
				default:
					t.Errorf("Publish: %v", err)
				}
				return // first error: this worker is done
			}
			t.Error("100,000 publishes and the broker never died")
		})
	}
	testtool.WaitFor(t, 10*time.Second, "1,000 PUBACKs", func() bool { return relay.pubacks.Load()-base >= 1000 })
	b.Kill()
	killed := time.Now()
	done := make(chan struct{})
	go func() { wg.Wait(); close(done) }()
	select {
	case <-done:
	case <-time.After(5 * time.Second):
		buf := make([]byte, 1<<20)
		t.Logf("goroutines:\n%s", buf[:runtime.Stack(buf, true)])
		t.Fatal("publishers still blocked 5s after the broker was killed")
	}
	pubacks := relay.pubacks.Load() - base
	t.Logf("after kill -9: %v to fail all; %d acked, %d PUBACKs passed, %d lost in flight, %d not connected",
		time.Since(killed), acked.Load(), pubacks, lost.Load(), notConn.Load())
	if acked.Load() > pubacks {
		t.Fatalf("%d publishes returned nil but only %d PUBACKs reached the upstream", acked.Load(), pubacks)
	}
	mqtttest.WaitConnected(t, m.Connected, false)
}

// TestMQTTLoadTopic checks that a retained load report, and a later
// update, reach OnLoad.
func TestMQTTLoadTopic(t *testing.T) {
	b := mqtttest.Broker(t, mqtttest.BrokerOptions{})
	const topic = "$load/ingest-1"
	pub := mqtttest.Client(t, b.Addr(), "test-load-publisher")
	if tok := pub.Publish(topic, 1, true, `{"load":0.25}`); !tok.WaitTimeout(5*time.Second) || tok.Error() != nil {
		t.Fatalf("publish load report: %v", tok.Error())
	}
	loads := make(chan string, 10)
	m, _ := mqttRun(t, mqttConfig{URL: b.URL(), LoadTopic: topic, OnLoad: func(p []byte) { loads <- string(p) }})
	want := func(p string) {
		t.Helper()
		select {
		case got := <-loads:
			if got != p {
				t.Fatalf("OnLoad(%s), want %s", got, p)
			}
		case <-time.After(5 * time.Second):
			t.Fatalf("OnLoad never got %s", p)
		}
	}
	want(`{"load":0.25}`)
	mqtttest.WaitConnected(t, m.Connected, true)
	if tok := pub.Publish(topic, 1, true, `{"load":0.75}`); !tok.WaitTimeout(5*time.Second) || tok.Error() != nil {
		t.Fatalf("publish load report: %v", tok.Error())
	}
	want(`{"load":0.75}`)
}

// TestMQTTAtMostOnce: QoS 0 publishes arrive; nil means written, not acked.
func TestMQTTAtMostOnce(t *testing.T) {
	b := mqtttest.Broker(t, mqtttest.BrokerOptions{})
	sub := mqtttest.Subscribe(t, b.Addr(), "fieldlink/s1/gw1/q0")
	m, _ := mqttRun(t, mqttConfig{URL: b.URL(), AtMostOnce: true})
	mqtttest.WaitConnected(t, m.Connected, true)
	for i := range 100 {
		if err := m.publish(context.Background(), map[string]string{"data_type": "q0"}, fmt.Appendf(nil, "%d", i)); err != nil {
			t.Fatal(err)
		}
	}
	testtool.WaitFor(t, 5*time.Second, "100 QoS 0 packets", func() bool { return sub.Count() >= 100 })
}
