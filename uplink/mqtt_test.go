package uplink

import (
	"context"
	"errors"
	"fmt"
	"net"
	"os/exec"
	"path/filepath"
	"runtime"
	"slices"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"fieldlink/internal/testtool"

	paho "github.com/eclipse/paho.mqtt.golang"
)

var mqttVars = map[string]string{"site": "s1", "gateway": "gw1"}

func TestMQTTNewConfig(t *testing.T) {
	tests := []struct {
		name    string
		cfg     MQTTConfig
		wantErr string // substring; "" means success
		check   func(t *testing.T, m *MQTT)
	}{
		{name: "defaults", cfg: MQTTConfig{URL: "mqtt://broker.example"}, check: func(t *testing.T, m *MQTT) {
			if m.addr != "broker.example:1883" || m.Name() != "mqtt://broker.example:1883" {
				t.Errorf("addr %q name %q", m.addr, m.Name())
			}
			if m.qos != 1 || m.Window() != 64 || m.status != "fieldlink/s1/gw1/status" {
				t.Errorf("qos %d window %d status %q", m.qos, m.Window(), m.status)
			}
			if !strings.HasPrefix(m.cfg.ClientID, "fieldlink-gw1-") {
				t.Errorf("client id %q", m.cfg.ClientID)
			}
			if m.cfg.KeepAlive != 30*time.Second || m.cfg.ConnectTimeout != 5*time.Second || m.cfg.PublishTimeout != 10*time.Second {
				t.Errorf("timeouts %v %v %v", m.cfg.KeepAlive, m.cfg.ConnectTimeout, m.cfg.PublishTimeout)
			}
		}},
		{name: "mqtts default port", cfg: MQTTConfig{URL: "mqtts://broker.example"}, check: func(t *testing.T, m *MQTT) {
			if m.addr != "broker.example:8883" || !m.useTLS || m.tlsConfig == nil || m.tlsConfig.InsecureSkipVerify {
				t.Errorf("addr %q tls %v", m.addr, m.useTLS)
			}
		}},
		{name: "ipv6 and port", cfg: MQTTConfig{URL: "mqtt://[::1]:1999/"}, check: func(t *testing.T, m *MQTT) {
			if m.addr != "[::1]:1999" {
				t.Errorf("addr %q", m.addr)
			}
		}},
		{name: "qos 0 means the default 1", cfg: MQTTConfig{URL: "mqtt://h", QoS: 0}, check: func(t *testing.T, m *MQTT) {
			if m.qos != 1 {
				t.Errorf("qos %d", m.qos)
			}
		}},
		{name: "at most once", cfg: MQTTConfig{URL: "mqtt://h", AtMostOnce: true}, check: func(t *testing.T, m *MQTT) {
			if m.qos != 0 {
				t.Errorf("qos %d", m.qos)
			}
		}},
		{name: "explicit client id and window", cfg: MQTTConfig{URL: "mqtt://h", ClientID: "me", Window: 7}, check: func(t *testing.T, m *MQTT) {
			if m.cfg.ClientID != "me" || m.Window() != 7 {
				t.Errorf("client id %q window %d", m.cfg.ClientID, m.Window())
			}
		}},
		{name: "tcp alias refused", cfg: MQTTConfig{URL: "tcp://h:1883"}, wantErr: "write mqtt://"},
		{name: "ssl alias refused", cfg: MQTTConfig{URL: "ssl://h:8883"}, wantErr: "write mqtts://"},
		{name: "ws refused", cfg: MQTTConfig{URL: "ws://h"}, wantErr: "not supported"},
		{name: "no scheme", cfg: MQTTConfig{URL: "h:1883"}, wantErr: "must start with"},
		{name: "credentials in URL", cfg: MQTTConfig{URL: "mqtt://u:hunter2@h:1883"}, wantErr: "password_file"},
		{name: "path", cfg: MQTTConfig{URL: "mqtt://h/x"}, wantErr: "no path"},
		{name: "bad port", cfg: MQTTConfig{URL: "mqtt://h:99999"}, wantErr: "port"},
		{name: "qos 2", cfg: MQTTConfig{URL: "mqtt://h", QoS: 2}, wantErr: "qos 2"},
		{name: "window negative", cfg: MQTTConfig{URL: "mqtt://h", Window: -1}, wantErr: "window"},
		{name: "window too big", cfg: MQTTConfig{URL: "mqtt://h", Window: 70000}, wantErr: "window"},
		{name: "topic var unknown", cfg: MQTTConfig{URL: "mqtt://h", Topic: "a/{farm}/{data_type}"}, wantErr: "{farm}"},
		{name: "topic wildcard", cfg: MQTTConfig{URL: "mqtt://h", Topic: "a/+/{data_type}"}, wantErr: "'+'"},
		{name: "topic brace", cfg: MQTTConfig{URL: "mqtt://h", Topic: "a/{data_type"}, wantErr: "without '}'"},
		{name: "status needs vars", cfg: MQTTConfig{URL: "mqtt://h", Topic: "t/{data_type}", StatusTopic: "st/{farm}", ClientID: "c"}, wantErr: "{farm}"},
		{name: "onload without topic", cfg: MQTTConfig{URL: "mqtt://h", OnLoad: func([]byte) {}}, wantErr: "LoadTopic"},
		{name: "keepalive too short", cfg: MQTTConfig{URL: "mqtt://h", KeepAlive: time.Millisecond}, wantErr: "keep-alive"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			if tt.cfg.Vars == nil {
				tt.cfg.Vars = mqttVars
			}
			m, err := NewMQTT(tt.cfg)
			if tt.wantErr != "" {
				if err == nil || !strings.Contains(err.Error(), tt.wantErr) {
					t.Fatalf("err = %v, want one containing %q", err, tt.wantErr)
				}
				if strings.Contains(err.Error(), "hunter2") {
					t.Fatalf("error shows the password: %v", err)
				}
				return
			}
			if err != nil {
				t.Fatal(err)
			}
			tt.check(t, m)
		})
	}
	t.Run("no gateway for the default client id", func(t *testing.T) {
		_, err := NewMQTT(MQTTConfig{URL: "mqtt://h", Topic: "t/{data_type}", StatusTopic: "st"})
		if err == nil || !strings.Contains(err.Error(), "client id") {
			t.Fatalf("err = %v", err)
		}
	})
}

func TestMQTTTopicTemplate(t *testing.T) {
	vars := map[string]string{"site": "farm-7", "gateway": "gw1", "slash": "a/b", "data_type": "ignored"}
	tests := []struct {
		tmpl    string
		pub     map[string]string
		want    string
		wantErr string // from bind or render
	}{
		{"fieldlink/{site}/{gateway}/{data_type}", map[string]string{"data_type": "rain"}, "fieldlink/farm-7/gw1/rain", ""},
		{"x/{site}/{device}/{data_type}", map[string]string{"data_type": "gas", "device": "ch4-1"}, "x/farm-7/ch4-1/gas", ""},
		{"{data_type}", map[string]string{"data_type": "a"}, "a", ""},
		{"plain/topic", nil, "plain/topic", ""},
		{"t/{site}", map[string]string{"site": "not-per-packet"}, "t/farm-7", ""},
		{"t/{device}", map[string]string{"data_type": "x"}, "", "{device} has no value in the packet"},
		{"t/{device}", map[string]string{"device": ""}, "", "{device} has no value"},
		{"t/{device}", map[string]string{"device": "a/b"}, "", "not allowed"},
		{"t/{device}", map[string]string{"device": "a+"}, "", "not allowed"},
		{"t/{device}", map[string]string{"device": "#"}, "", "not allowed"},
		{"t/{farm}", nil, "", "{farm} has no value in vars"},
		{"t/{slash}", nil, "", "not allowed"},
	}
	for _, tt := range tests {
		tp, err := mqttParseTemplate(tt.tmpl)
		if err != nil {
			t.Fatalf("%q: %v", tt.tmpl, err)
		}
		tp, err = tp.bind(vars, "data_type", "device")
		got := ""
		if err == nil {
			got, err = tp.render(tt.pub)
		}
		if tt.wantErr != "" {
			if err == nil || !strings.Contains(err.Error(), tt.wantErr) {
				t.Errorf("%q %v: err = %v, want %q", tt.tmpl, tt.pub, err, tt.wantErr)
			}
			continue
		}
		if err != nil || got != tt.want {
			t.Errorf("%q %v = %q, %v; want %q", tt.tmpl, tt.pub, got, err, tt.want)
		}
	}
	m, err := NewMQTT(MQTTConfig{URL: "mqtt://h", Vars: vars})
	if err != nil {
		t.Fatal(err)
	}
	err = m.publish(context.Background(), map[string]string{"data_type": "a/b"}, nil)
	var perm interface{ Permanent() bool }
	if !errors.As(err, &perm) || !perm.Permanent() {
		t.Errorf("Publish with a bad topic = %v, want a permanent error", err)
	}
	if m.Window() != DefaultWindow {
		t.Errorf("Window() = %d", m.Window())
	}
	for _, bad := range []string{"", "a/{}", "a/}", "a/{b{c}}", "a/#", "a\x00"} {
		if _, err := mqttParseTemplate(bad); err == nil {
			t.Errorf("template %q accepted", bad)
		}
	}
}

func TestMQTTPublishWithoutRunFailsAtOnce(t *testing.T) {
	// An hour's publish timeout: a Publish that waited for it instead of
	// failing at once would hang the test.
	m, err := NewMQTT(MQTTConfig{URL: "mqtt://127.0.0.1:1", Vars: mqttVars, PublishTimeout: time.Hour})
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
	b := mqttStartBroker(t, mqttBrokerOpts{})
	sub := mqttSubscribe(t, b.Addr(), "fieldlink/s1/gw1/gas")
	m, _ := mqttRun(t, MQTTConfig{URL: b.URL()})
	mqttWaitConnected(t, m, true)

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
	testtool.WaitFor(t, 10*time.Second, "the subscriber to get 2,000 packets", func() bool { return sub.count() >= workers*each })
	for w := range workers {
		for i := range each {
			if p := fmt.Sprintf(`{"w":%d,"i":%d}`, w, i); !sub.has(p) {
				t.Fatalf("subscriber never got %s", p)
			}
		}
	}
	if c := m.cur.Load(); c == nil || len(c.slots) != 0 {
		t.Fatalf("window slots still taken after every Publish returned (connection %v)", c != nil)
	}
}

// TestMQTTNoPUBACKNoSuccess is the proof that a nil from Publish means a
// PUBACK: a relay swallows everything the broker sends back, so the
// broker gets the packets (a subscriber sees them) but no PUBACK reaches
// the upstream; then the relay cuts the link. Every Publish must fail, and
// quickly, not by timeout. It also checks the window: with Window 8, only
// 8 packets leave while no PUBACK comes back.
func TestMQTTNoPUBACKNoSuccess(t *testing.T) {
	b := mqttStartBroker(t, mqttBrokerOpts{})
	sub := mqttSubscribe(t, b.Addr(), "fieldlink/s1/gw1/t")
	relay := mqttStartRelay(t, b.Addr())
	const window, n = 8, 20
	m, _ := mqttRun(t, MQTTConfig{URL: relay.url(), Window: window, PublishTimeout: 30 * time.Second})
	mqttWaitConnected(t, m, true)
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
	testtool.WaitFor(t, 10*time.Second, "the broker to get a window of packets", func() bool { return sub.count() >= window })
	time.Sleep(300 * time.Millisecond) // no more may leave while no PUBACK comes back
	if got := sub.count(); got != window {
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
			if sub.has(r.payload) {
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
	mqttWaitConnected(t, m, false)
}

// TestMQTTAckTimeout: when PUBACKs stop coming on a link that stays up,
// Publish fails after PublishTimeout, the connection is made again, and
// publishing works on the new one.
func TestMQTTAckTimeout(t *testing.T) {
	b := mqttStartBroker(t, mqttBrokerOpts{})
	relay := mqttStartRelay(t, b.Addr())
	m, _ := mqttRun(t, MQTTConfig{URL: relay.url(), PublishTimeout: 300 * time.Millisecond})
	mqttWaitConnected(t, m, true)
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
// of pipelined publishes: every Publish returns, none hangs, and no more
// of them return nil than PUBACKs reached the upstream.
func TestMQTTBrokerKilled(t *testing.T) {
	b := mqttStartBroker(t, mqttBrokerOpts{})
	relay := mqttStartRelay(t, b.Addr()) // only to count PUBACKs
	// PublishTimeout bounds how long paho may hold Run's pump after the loss.
	m, _ := mqttRun(t, MQTTConfig{URL: relay.url(), PublishTimeout: 2 * time.Second})
	mqttWaitConnected(t, m, true)
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
	mqttWaitConnected(t, m, false)
}

// TestMQTTReconnect stops the broker, checks Publish fails fast, starts it
// again on the same port and checks Run reconnects by itself.
func TestMQTTReconnect(t *testing.T) {
	b := mqttStartBroker(t, mqttBrokerOpts{})
	m, _ := mqttRun(t, MQTTConfig{URL: b.URL()})
	mqttWaitConnected(t, m, true)
	vars := map[string]string{"data_type": "r"}
	if err := m.publish(context.Background(), vars, []byte("before")); err != nil {
		t.Fatal(err)
	}
	b.Kill()
	mqttWaitConnected(t, m, false)
	err := m.publish(context.Background(), vars, []byte("during"))
	if !errors.Is(err, errMQTTNotConnected) {
		t.Fatalf("Publish with the broker down = %v, want ErrMQTTNotConnected", err)
	}
	t.Logf("with the broker down: %v", err)
	b.Start()
	mqttWaitConnected(t, m, true)
	if err := m.publish(context.Background(), vars, []byte("after")); err != nil {
		t.Fatalf("Publish after the broker came back: %v", err)
	}
}

// TestMQTTStatusTopic checks the retained status: "online" after connect,
// "offline" from the last will when the link breaks, "online" again after
// the reconnect, and "offline" published by Run as it ends.
func TestMQTTStatusTopic(t *testing.T) {
	b := mqttStartBroker(t, mqttBrokerOpts{})
	relay := mqttStartRelay(t, b.Addr())
	logger, logs := mqttLogger(t)
	m, stop := mqttRun(t, MQTTConfig{URL: relay.url(), Logger: logger})
	const topic = "fieldlink/s1/gw1/status"
	mqttWaitConnected(t, m, true)
	if got := mqttRetained(t, b.Addr(), topic); got != "online" {
		t.Fatalf("retained status after connect = %q, want online", got)
	}

	relay.refuse.Store(true)
	relay.cut()
	testtool.WaitFor(t, 10*time.Second, "the last will", func() bool { return mqttRetained(t, b.Addr(), topic) == "offline" })

	relay.refuse.Store(false)
	mqttWaitConnected(t, m, true)
	if got := mqttRetained(t, b.Addr(), topic); got != "online" {
		t.Fatalf("retained status after reconnect = %q, want online", got)
	}

	stop() // Run returns only after the broker acknowledged "offline"
	if got := mqttRetained(t, b.Addr(), topic); got != "offline" {
		t.Fatalf("retained status after Run returned = %q, want offline", got)
	}
	if !strings.Contains(logs.String(), "mqtt disconnected") || strings.Contains(logs.String(), "last will") {
		t.Fatalf("Run did not end cleanly:\n%s", logs.String())
	}
	if m.Connected() {
		t.Fatal("Connected() after Run returned")
	}
}

// TestMQTTStatusTopicSetting checks uplink.status_topic: a template of its
// own gets the retained "online", and StatusTopicOff publishes no status at
// all, not even the last will. Messages of one client arrive in order, so
// the data published after each connect is the mark that a status would
// have come before.
func TestMQTTStatusTopicSetting(t *testing.T) {
	for _, tc := range []struct {
		setting, want string // want: the status topic, "" for none
	}{
		{"alive/{site}/{gateway}", "alive/s1/gw1"},
		{statusTopicOff, ""},
	} {
		t.Run(tc.setting, func(t *testing.T) {
			b := mqttStartBroker(t, mqttBrokerOpts{})
			relay := mqttStartRelay(t, b.Addr())
			seen := make(chan string, 100)
			sub := mqttClient(t, b.Addr(), "test-status-sub")
			defer sub.Disconnect(0)
			if tok := sub.Subscribe("#", 1, func(_ paho.Client, m paho.Message) {
				seen <- m.Topic() + " " + string(m.Payload())
			}); !tok.WaitTimeout(10*time.Second) || tok.Error() != nil {
				t.Fatalf("subscribe: %v", tok.Error())
			}
			m, stop := mqttRun(t, MQTTConfig{URL: relay.url(), StatusTopic: tc.setting})
			defer stop()
			var got []string
			// upTo collects what the broker passed on up to the data
			// message with payload mark.
			upTo := func(mark string) {
				for msg := range seen {
					if msg == "fieldlink/s1/gw1/r "+mark {
						return
					}
					got = append(got, msg)
				}
			}
			mqttWaitConnected(t, m, true)
			if err := m.publish(context.Background(), map[string]string{"data_type": "r"}, []byte("first")); err != nil {
				t.Fatal(err)
			}
			upTo("first")
			relay.refuse.Store(true)
			relay.cut() // the last will, if any
			mqttWaitConnected(t, m, false)
			relay.refuse.Store(false)
			mqttWaitConnected(t, m, true)
			if err := m.publish(context.Background(), map[string]string{"data_type": "r"}, []byte("second")); err != nil {
				t.Fatal(err)
			}
			upTo("second")
			var want []string
			if tc.want != "" {
				// The will and the reconnect's "online" may cross.
				want = []string{tc.want + " offline", tc.want + " online", tc.want + " online"}
			}
			slices.Sort(got)
			if !slices.Equal(got, want) {
				t.Errorf("status messages %q, want %q", got, want)
			}
		})
	}
	if err := CheckStatusTopic("fieldlink/{site}/{gateway}/{data_type}"); err == nil {
		t.Error("CheckStatusTopic takes a per-packet {data_type}")
	}
	for _, ok := range []string{"", statusTopicOff, DefaultStatusTopic, "plain/topic"} {
		if err := CheckStatusTopic(ok); err != nil {
			t.Errorf("CheckStatusTopic(%q): %v", ok, err)
		}
	}
}

// TestMQTTLoadTopic checks that a retained load report, and a later
// update, reach OnLoad.
func TestMQTTLoadTopic(t *testing.T) {
	b := mqttStartBroker(t, mqttBrokerOpts{})
	const topic = "$load/ingest-1"
	pub := mqttClient(t, b.Addr(), "test-load-publisher")
	if tok := pub.Publish(topic, 1, true, `{"load":0.25}`); !tok.WaitTimeout(5*time.Second) || tok.Error() != nil {
		t.Fatalf("publish load report: %v", tok.Error())
	}
	loads := make(chan string, 10)
	m, _ := mqttRun(t, MQTTConfig{URL: b.URL(), LoadTopic: topic, OnLoad: func(p []byte) { loads <- string(p) }})
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
	mqttWaitConnected(t, m, true)
	if tok := pub.Publish(topic, 1, true, `{"load":0.75}`); !tok.WaitTimeout(5*time.Second) || tok.Error() != nil {
		t.Fatalf("publish load report: %v", tok.Error())
	}
	want(`{"load":0.75}`)
}

// TestMQTTCredentials runs mosquitto with a password file: a wrong
// password gives a clear error that does not show it; the right one
// works; and no log line ever shows a password.
func TestMQTTCredentials(t *testing.T) {
	passwd := testtool.RequireSbin(t, "mosquitto_passwd", "mosquitto")
	const user, secret, wrong = "gw1", "Pa55-w0rd-QX7", "Wr0ng-pa55-ZK9"
	file := filepath.Join(t.TempDir(), "passwd")
	if out, err := exec.Command(passwd, "-b", "-c", file, user, secret).CombinedOutput(); err != nil {
		t.Fatalf("mosquitto_passwd: %v\n%s", err, out)
	}
	b := mqttStartBroker(t, mqttBrokerOpts{passwordFile: file})
	logger, logs := mqttLogger(t)
	vars := map[string]string{"data_type": "c"}

	t.Run("wrong password", func(t *testing.T) {
		cfg := MQTTConfig{URL: b.URL(), Username: user, Password: wrong, Logger: logger}
		m, stop := mqttRun(t, cfg)
		var err error
		testtool.WaitFor(t, 10*time.Second, "a connect error", func() bool {
			err = m.publish(context.Background(), vars, []byte("x"))
			return err != nil && strings.Contains(err.Error(), "last error")
		})
		stop()
		t.Logf("Publish: %v", err)
		if !errors.Is(err, errMQTTNotConnected) || !strings.Contains(err.Error(), "not Authorized") && !strings.Contains(err.Error(), "bad user name or password") {
			t.Fatalf("Publish = %v, want a not-connected error saying why", err)
		}
		for _, s := range []string{err.Error(), fmt.Sprint(cfg), fmt.Sprintf("%+v", cfg), fmt.Sprintf("%#v", cfg), fmt.Sprintf("%+v", m), fmt.Sprint(m)} {
			if strings.Contains(s, wrong) {
				t.Fatalf("password shown: %s", s)
			}
		}
	})
	t.Run("right password", func(t *testing.T) {
		m, stop := mqttRun(t, MQTTConfig{URL: b.URL(), Username: user, Password: secret, Logger: logger})
		mqttWaitConnected(t, m, true)
		if err := m.publish(context.Background(), vars, []byte("x")); err != nil {
			t.Fatal(err)
		}
		stop()
	})
	if !strings.Contains(logs.String(), "mqtt connected") || !strings.Contains(logs.String(), "mqtt upstream down") {
		t.Fatalf("expected connect and failure lines in the log:\n%s", logs.String())
	}
	for _, p := range []string{secret, wrong} {
		if strings.Contains(logs.String(), p) {
			t.Fatalf("a password is in the log:\n%s", logs.String())
		}
	}
}

// TestMQTTAtMostOnce: QoS 0 publishes arrive; nil means written, not acked.
func TestMQTTAtMostOnce(t *testing.T) {
	b := mqttStartBroker(t, mqttBrokerOpts{})
	sub := mqttSubscribe(t, b.Addr(), "fieldlink/s1/gw1/q0")
	m, _ := mqttRun(t, MQTTConfig{URL: b.URL(), AtMostOnce: true})
	mqttWaitConnected(t, m, true)
	for i := range 100 {
		if err := m.publish(context.Background(), map[string]string{"data_type": "q0"}, fmt.Appendf(nil, "%d", i)); err != nil {
			t.Fatal(err)
		}
	}
	testtool.WaitFor(t, 5*time.Second, "100 QoS 0 packets", func() bool { return sub.count() >= 100 })
}

// TestMQTTRunStops checks Run returns promptly when its context ends,
// whatever it is doing, and leaves none of its goroutines behind.
func TestMQTTRunStops(t *testing.T) {
	silent, err := net.Listen("tcp", "127.0.0.1:0") // accepts, never answers CONNECT
	if err != nil {
		t.Fatal(err)
	}
	var held []net.Conn
	var mu sync.Mutex
	go func() {
		for {
			c, err := silent.Accept()
			if err != nil {
				return
			}
			mu.Lock()
			held = append(held, c)
			mu.Unlock()
		}
	}()
	t.Cleanup(func() {
		silent.Close()
		mu.Lock()
		for _, c := range held {
			c.Close()
		}
		mu.Unlock()
	})
	b := mqttStartBroker(t, mqttBrokerOpts{})
	tests := []struct {
		name  string
		url   string
		ready func(m *MQTT) bool
	}{
		{"backing off", "mqtt://127.0.0.1:" + fmt.Sprint(testtool.FreePort(t)), func(m *MQTT) bool { return m.lastErr.Load() != nil }},
		{"waiting for CONNACK", "mqtt://" + silent.Addr().String(), func(m *MQTT) bool { mu.Lock(); defer mu.Unlock(); return len(held) > 0 }},
		{"connected", b.URL(), func(m *MQTT) bool { return m.Connected() }},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			// An hour's connect timeout: a Run that waited for it would
			// hang the test (go test -timeout).
			m, stop := mqttRun(t, MQTTConfig{URL: tt.url, ConnectTimeout: time.Hour})
			testtool.WaitFor(t, 10*time.Second, tt.name, func() bool { return tt.ready(m) })
			stop()
			testtool.WaitFor(t, 2*time.Second, "no goroutine of MQTT left", func() bool {
				buf := make([]byte, 1<<20)
				return !strings.Contains(string(buf[:runtime.Stack(buf, true)]), "uplink.(*MQTT).")
			})
		})
	}
}

// TestMQTTStopWhilePublishing ends Run under a stream of pipelined
// publishes: it returns promptly, every Publish returns, and no more of
// them returned nil than PUBACKs reached the upstream.
func TestMQTTStopWhilePublishing(t *testing.T) {
	b := mqttStartBroker(t, mqttBrokerOpts{})
	relay := mqttStartRelay(t, b.Addr())
	m, stop := mqttRun(t, MQTTConfig{URL: relay.url(), PublishTimeout: time.Hour})
	mqttWaitConnected(t, m, true)
	base := relay.pubacks.Load()
	var acked atomic.Int64
	var wg sync.WaitGroup
	for w := range 32 {
		wg.Go(func() {
			for i := 0; i < 100000; i++ {
				if err := m.publish(context.Background(), map[string]string{"data_type": "s"}, fmt.Appendf(nil, "%d-%d", w, i)); err != nil {
					if !errors.Is(err, errMQTTNotConnected) && !errors.Is(err, errMQTTConnLost) {
						t.Errorf("Publish: %v", err)
					}
					return
				}
				acked.Add(1)
			}
		})
	}
	testtool.WaitFor(t, 10*time.Second, "1,000 PUBACKs", func() bool { return relay.pubacks.Load()-base >= 1000 })
	stop() // a stop that waited for the PUBACKs' timeout would hang the test
	wg.Wait()
	// The last PUBACK counted is the one of "offline".
	if got, max := acked.Load(), relay.pubacks.Load()-base-1; got > max {
		t.Fatalf("%d publishes returned nil but only %d data PUBACKs reached the upstream", got, max)
	}
	t.Logf("%d acked", acked.Load())
	if got := mqttRetained(t, b.Addr(), "fieldlink/s1/gw1/status"); got != "offline" {
		t.Fatalf("retained status = %q, want offline", got)
	}
}

func BenchmarkMQTTTopic(b *testing.B) {
	tp, err := mqttParseTemplate(DefaultTopic)
	if err == nil {
		tp, err = tp.bind(mqttVars, "data_type", "device")
	}
	if err != nil {
		b.Fatal(err)
	}
	pv := map[string]string{"data_type": "gas", "device": "ch4-1"}
	b.ReportAllocs()
	for b.Loop() {
		if _, err := tp.render(pv); err != nil {
			b.Fatal(err)
		}
	}
}

// Kick ends a reconnect wait: a broker that is back is used at once, not
// after the backoff that grew while it was down.
func TestMQTTKickReconnectsAtOnce(t *testing.T) {
	br := mqttStartBroker(t, mqttBrokerOpts{})
	log, logged := mqttLogger(t)
	m, err := NewMQTT(MQTTConfig{URL: br.URL(), Logger: log, Vars: map[string]string{"site": "s1", "gateway": "gw1"}})
	if err != nil {
		t.Fatal(err)
	}
	m.backoffMin, m.backoffMax = 30*time.Second, 60*time.Second
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan struct{})
	go func() { defer close(done); m.Run(ctx) }()
	defer func() { cancel(); <-done }()
	mqttWaitConnected(t, m, true)
	br.Kill()
	mqttWaitConnected(t, m, false)
	// Run says it is down, with its wait, just before it waits: 15 s or more.
	testtool.WaitFor(t, 10*time.Second, "Run to start its backoff", func() bool {
		return strings.Contains(logged.String(), "mqtt upstream down")
	})
	br.Start()
	m.Kick()
	// Well inside the backoff: only the kick can have ended the wait.
	testtool.WaitFor(t, 10*time.Second, "the reconnect the kick asks for", m.Connected)
}

// doneToken is a paho token that has completed with err.
type doneToken struct{ err error }

func (doneToken) Wait() bool                     { return true }
func (doneToken) WaitTimeout(time.Duration) bool { return true }
func (doneToken) Done() <-chan struct{}          { c := make(chan struct{}); close(c); return c }
func (t doneToken) Error() error                 { return t.err }

// pendingToken is a paho token that never completes.
type pendingToken struct{}

func (pendingToken) Wait() bool                     { return false }
func (pendingToken) WaitTimeout(time.Duration) bool { return false }
func (pendingToken) Done() <-chan struct{}          { return nil }
func (pendingToken) Error() error                   { return nil }

// TestMQTTConnectErrorNamesTheUpstreamOnce: a connect that fails while it
// announces itself (subscribing, publishing "online") becomes the last
// error that Publish quotes; the upstream's URL must appear once, not once
// per layer.
func TestMQTTConnectErrorNamesTheUpstreamOnce(t *testing.T) {
	m := &MQTT{name: "mqtt://broker.example:1883"}
	lost := &mqttConn{lost: make(chan struct{})}
	lost.markLost(errors.New("connection lost: EOF"))
	cancelled, cancel := context.WithCancel(context.Background())
	cancel()
	for name, await := range map[string]func() error{
		"token failed": func() error {
			return m.await(context.Background(), &mqttConn{lost: make(chan struct{})}, doneToken{errors.New("EOF")}, time.Hour)
		},
		"connection lost": func() error { return m.await(context.Background(), lost, pendingToken{}, time.Hour) },
		"no answer": func() error {
			return m.await(context.Background(), &mqttConn{lost: make(chan struct{})}, pendingToken{}, time.Millisecond)
		},
		"stopped": func() error {
			return m.await(cancelled, &mqttConn{lost: make(chan struct{})}, pendingToken{}, time.Hour)
		},
	} {
		err := await()
		if err == nil {
			t.Fatalf("%s: await returned nil", name)
		}
		m.setLastErr(fmt.Errorf("publish %q on the status topic: %w", mqttStatusOnline, err))
		if msg := m.notConnected().Error(); strings.Count(msg, m.name) != 1 {
			t.Errorf("%s: %q names the upstream %d times", name, msg, strings.Count(msg, m.name))
		}
	}
}
