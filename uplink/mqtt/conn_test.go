package mqtt

import (
	"context"
	"errors"
	"fieldlink/uplink/mqtt/mqtttest"
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
	"fieldlink/uplink"
	"fieldlink/uplink/site"

	paho "github.com/eclipse/paho.mqtt.golang"
)

// TestMQTTReconnect stops the broker, checks publish fails fast, starts it
// again on the same port and checks Run reconnects by itself.
func TestMQTTReconnect(t *testing.T) {
	b := mqtttest.Broker(t, mqtttest.BrokerOptions{})
	m, _ := mqttRun(t, mqttConfig{URL: b.URL()})
	mqtttest.WaitConnected(t, m.Connected, true)
	vars := map[string]string{"data_type": "r"}
	if err := m.publish(context.Background(), vars, []byte("before")); err != nil {
		t.Fatal(err)
	}
	b.Kill()
	mqtttest.WaitConnected(t, m.Connected, false)
	err := m.publish(context.Background(), vars, []byte("during"))
	if !errors.Is(err, errMQTTNotConnected) {
		t.Fatalf("Publish with the broker down = %v, want ErrMQTTNotConnected", err)
	}
	t.Logf("with the broker down: %v", err)
	b.Start()
	mqtttest.WaitConnected(t, m.Connected, true)
	if err := m.publish(context.Background(), vars, []byte("after")); err != nil {
		t.Fatalf("Publish after the broker came back: %v", err)
	}
}

// TestMQTTStatusTopic checks the retained status: "online" after connect,
// "offline" from the last will when the link breaks, "online" again after
// the reconnect, and "offline" published by Run as it ends.
func TestMQTTStatusTopic(t *testing.T) {
	b := mqtttest.Broker(t, mqtttest.BrokerOptions{})
	relay := mqttStartRelay(t, b.Addr())
	logger, logs := mqtttest.Logger(t)
	m, stop := mqttRun(t, mqttConfig{URL: relay.url(), Logger: logger})
	const topic = "fieldlink/s1/gw1/status"
	mqtttest.WaitConnected(t, m.Connected, true)
	if got := mqttRetained(t, b.Addr(), topic); got != "online" {
		t.Fatalf("retained status after connect = %q, want online", got)
	}

	relay.refuse.Store(true)
	relay.cut()
	testtool.WaitFor(t, 10*time.Second, "the last will", func() bool { return mqttRetained(t, b.Addr(), topic) == "offline" })

	relay.refuse.Store(false)
	mqtttest.WaitConnected(t, m.Connected, true)
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
			b := mqtttest.Broker(t, mqtttest.BrokerOptions{})
			relay := mqttStartRelay(t, b.Addr())
			seen := make(chan string, 100)
			sub := mqtttest.Client(t, b.Addr(), "test-status-sub")
			defer sub.Disconnect(0)
			if tok := sub.Subscribe("#", 1, func(_ paho.Client, m paho.Message) {
				seen <- m.Topic() + " " + string(m.Payload())
			}); !tok.WaitTimeout(10*time.Second) || tok.Error() != nil {
				t.Fatalf("subscribe: %v", tok.Error())
			}
			m, stop := mqttRun(t, mqttConfig{URL: relay.url(), StatusTopic: tc.setting})
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
			mqtttest.WaitConnected(t, m.Connected, true)
			if err := m.publish(context.Background(), map[string]string{"data_type": "r"}, []byte("first")); err != nil {
				t.Fatal(err)
			}
			upTo("first")
			relay.refuse.Store(true)
			relay.cut() // the last will, if any
			mqtttest.WaitConnected(t, m.Connected, false)
			relay.refuse.Store(false)
			mqtttest.WaitConnected(t, m.Connected, true)
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
	if err := site.CheckTopic("fieldlink/{site}/{gateway}/{data_type}"); err == nil {
		t.Error("CheckStatusTopic takes a per-packet {data_type}")
	}
	for _, ok := range []string{"", statusTopicOff, uplink.DefaultStatusTopic, "plain/topic"} {
		if err := site.CheckTopic(ok); err != nil {
			t.Errorf("site.CheckTopic(%q): %v", ok, err)
		}
	}
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
	b := mqtttest.Broker(t, mqtttest.BrokerOptions{PasswordFile: file})
	logger, logs := mqtttest.Logger(t)
	vars := map[string]string{"data_type": "c"}

	t.Run("wrong password", func(t *testing.T) {
		cfg := mqttConfig{URL: b.URL(), Username: user, Password: wrong, Logger: logger}
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
		m, stop := mqttRun(t, mqttConfig{URL: b.URL(), Username: user, Password: secret, Logger: logger})
		mqtttest.WaitConnected(t, m.Connected, true)
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
	b := mqtttest.Broker(t, mqtttest.BrokerOptions{})
	tests := []struct {
		name  string
		url   string
		ready func(m *mqttUpstream) bool
	}{
		{"backing off", "mqtt://" + testtool.RefusedAddr(t), func(m *mqttUpstream) bool { return m.lastErr.Load() != nil }},
		{"waiting for CONNACK", "mqtt://" + silent.Addr().String(), func(m *mqttUpstream) bool { mu.Lock(); defer mu.Unlock(); return len(held) > 0 }},
		{"connected", b.URL(), func(m *mqttUpstream) bool { return m.Connected() }},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			// An hour's connect timeout: a Run that waited for it would
			// hang the test (go test -timeout).
			m, stop := mqttRun(t, mqttConfig{URL: tt.url, ConnectTimeout: time.Hour})
			testtool.WaitFor(t, 10*time.Second, tt.name, func() bool { return tt.ready(m) })
			stop()
			testtool.WaitFor(t, 2*time.Second, "no goroutine of MQTT left", func() bool {
				buf := make([]byte, 1<<20)
				return !strings.Contains(string(buf[:runtime.Stack(buf, true)]), "uplink.(*mqttUpstream).")
			})
		})
	}
}

// TestMQTTStopWhilePublishing ends Run under a stream of pipelined
// publishes: it returns promptly, every publish returns, and no more of
// them returned nil than PUBACKs reached the upstream.
func TestMQTTStopWhilePublishing(t *testing.T) {
	b := mqtttest.Broker(t, mqtttest.BrokerOptions{})
	relay := mqttStartRelay(t, b.Addr())
	m, stop := mqttRun(t, mqttConfig{URL: relay.url(), PublishTimeout: time.Hour})
	mqtttest.WaitConnected(t, m.Connected, true)
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

// Kick ends a reconnect wait: a broker that is back is used at once, not
// after the backoff that grew while it was down.
func TestMQTTKickReconnectsAtOnce(t *testing.T) {
	br := mqtttest.Broker(t, mqtttest.BrokerOptions{})
	log, logged := mqtttest.Logger(t)
	m, err := newMQTT(mqttConfig{URL: br.URL(), Logger: log, Vars: map[string]string{"site": "s1", "gateway": "gw1"}})
	if err != nil {
		t.Fatal(err)
	}
	m.backoffMin, m.backoffMax = 30*time.Second, 60*time.Second
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan struct{})
	go func() { defer close(done); m.Run(ctx) }()
	defer func() { cancel(); <-done }()
	mqtttest.WaitConnected(t, m.Connected, true)
	br.Kill()
	mqtttest.WaitConnected(t, m.Connected, false)
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
// error that publish quotes; the upstream's URL must appear once, not once
// per layer.
func TestMQTTConnectErrorNamesTheUpstreamOnce(t *testing.T) {
	m := &mqttUpstream{name: "mqtt://broker.example:1883"}
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

// Run refuses a second Run while the first runs, and runs again once it
// returned: a kind on the connection with several servers runs each in
// turn (see Upstream.Run).
func TestRunAgainOnceReturned(t *testing.T) {
	b := mqtttest.Broker(t, mqtttest.BrokerOptions{})
	log, buf := mqtttest.Logger(t)
	m, stop := mqttRun(t, mqttConfig{URL: b.URL(), Logger: log})
	mqtttest.WaitConnected(t, m.Connected, true)
	m.Run(context.Background()) // returns at once
	if !strings.Contains(buf.String(), "Run called twice") {
		t.Error("a second Run while the first runs was not refused")
	}
	stop()
	mqtttest.WaitConnected(t, m.Connected, false)
	mqtttest.Start(t, m.Run)
	mqtttest.WaitConnected(t, m.Connected, true)
}
