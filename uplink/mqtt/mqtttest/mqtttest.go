// Package mqtttest is what the tests of the MQTT kind and of the kinds
// built on its connection (fieldlink/uplink/sparkplug) share: a real
// mosquitto, a captured log, an upstream run until the test ends, paho
// clients and subscribers, and a pool that probes fast. Only tests import
// it.
package mqtttest

import (
	"context"
	"fmt"
	"log/slog"
	"sync"
	"testing"
	"time"

	"fieldlink/internal/testtool"
	"fieldlink/internal/testtool/brokertest"
	"fieldlink/selector"
	"fieldlink/uplink"
	paho "github.com/eclipse/paho.mqtt.golang"
)

// BrokerOptions add to a broker's configuration.
type BrokerOptions struct {
	PasswordFile string // if set, anonymous clients are refused
	// TLS listener: files of the CA, the server certificate and key; MTLS
	// asks for a client certificate.
	TLS  *testtool.Certs
	MTLS bool
}

// Broker runs a mosquitto configured by o until the test ends.
func Broker(t testing.TB, o BrokerOptions) *testtool.Mosquitto {
	t.Helper()
	var conf []string
	if o.TLS != nil {
		conf = append(conf, "cafile "+o.TLS.CA, "certfile "+o.TLS.ServerCert, "keyfile "+o.TLS.ServerKey)
		if o.MTLS {
			conf = append(conf, "require_certificate true")
		}
	}
	if o.PasswordFile != "" {
		// Comes after testtool's "allow_anonymous true": the last one wins.
		conf = append(conf, "allow_anonymous false", "password_file "+o.PasswordFile)
	}
	conf = append(conf, "log_type notice")
	return testtool.NewMosquitto(t, testtool.FindMosquitto(t), conf...)
}

// Logger returns a logger that writes everything, debug included, to
// the returned buffer (and to the test log on failure).
func Logger(t testing.TB) (*slog.Logger, *testtool.SyncBuffer) {
	buf := &testtool.SyncBuffer{}
	t.Cleanup(func() {
		if t.Failed() {
			t.Logf("uplink log:\n%s", buf.String())
		}
	})
	return slog.New(slog.NewTextHandler(buf, &slog.HandlerOptions{Level: slog.LevelDebug})), buf
}

// Start runs run (an upstream's Run) until the test ends and returns a
// function that ends it and waits for it to return.
func Start(t testing.TB, run func(ctx context.Context)) func() {
	t.Helper()
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan struct{})
	go func() { defer close(done); run(ctx) }()
	var once sync.Once
	stop := func() {
		once.Do(func() {
			cancel()
			select {
			case <-done:
			case <-time.After(15 * time.Second):
				t.Errorf("Run did not return within 15s of its context ending")
			}
		})
	}
	t.Cleanup(stop)
	return stop
}

// WaitConnected waits up to 10 s for connected to say want.
func WaitConnected(t testing.TB, connected func() bool, want bool) {
	t.Helper()
	testtool.WaitFor(t, 10*time.Second, fmt.Sprintf("Connected() == %v", want), func() bool { return connected() == want })
}

// Client connects a plain paho client (for subscribers and raw
// publishing) and disconnects it when the test ends.
func Client(t testing.TB, addr, id string) paho.Client {
	t.Helper()
	return brokertest.NewClient(t, brokertest.Options{Name: "test client " + id, ID: id, Brokers: []string{addr}, Quiesce: 100}).Paho()
}

// Subscriber records what a paho client receives on a topic filter.
type Subscriber struct {
	mu   sync.Mutex
	msgs map[string]int // payload → times received
	n    int
}

// Subscribe subscribes a new client to filter on the broker at addr.
func Subscribe(t testing.TB, addr, filter string) *Subscriber {
	t.Helper()
	s := &Subscriber{msgs: map[string]int{}}
	c := Client(t, addr, fmt.Sprintf("test-sub-%d", time.Now().UnixNano()))
	tok := c.Subscribe(filter, 1, func(_ paho.Client, m paho.Message) {
		s.mu.Lock()
		s.msgs[string(m.Payload())]++
		s.n++
		s.mu.Unlock()
	})
	if !tok.WaitTimeout(10*time.Second) || tok.Error() != nil {
		t.Fatalf("subscribe %s: %v", filter, tok.Error())
	}
	return s
}

// Count is how many messages arrived.
func (s *Subscriber) Count() int {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.n
}

// Has reports whether a message with payload arrived.
func (s *Subscriber) Has(payload string) bool {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.msgs[payload] > 0
}

// Pool is a pool whose probes run every 50 ms, with the site's
// variables, probing MQTT upstreams on probeTopic.
func Pool(t *testing.T, probeTopic string) (*uplink.Pool, *selector.Table) {
	t.Helper()
	table := selector.NewTable(selector.Options{})
	log, _ := Logger(t)
	strat, err := selector.New("least_conn", selector.StrategyOptions{})
	if err != nil {
		t.Fatal(err)
	}
	p := uplink.NewPool(uplink.PoolConfig{
		Table: table, Delivery: uplink.NewDelivery(nil, table, strat, uplink.DeliveryOptions{}),
		Window: 8, Batch: 10, ProbeInterval: 50 * time.Millisecond, ProbeTimeout: 40 * time.Millisecond,
		Vars: map[string]string{"site": "s1", "gateway": "gw1"}, ProbeTopic: probeTopic, Logger: log,
	})
	t.Cleanup(p.Stop)
	return p, table
}

// ProbesWithTCP checks that a pool with probeTopic probes the upstream up
// makes of a broker's URL with TCP connects: once it is connected (it
// published something) and probed, nothing but a marker published after
// has arrived under fieldlink-probe/.
func ProbesWithTCP(t *testing.T, probeTopic string, up func(url string) uplink.UpstreamConfig) {
	t.Helper()
	b := Broker(t, BrokerOptions{})
	sub := Subscribe(t, b.Addr(), "fieldlink-probe/#")
	// The gateway's first publish after it connects: its status, or its
	// kind's first message.
	any := Subscribe(t, b.Addr(), "#")
	p, table := Pool(t, probeTopic)
	idx, err := p.Add(up(b.URL()))
	if err != nil {
		t.Fatal(err)
	}
	// Wait for a probe that succeeded over the connection, then for a
	// probe it published to have had time to arrive: a marker published
	// after it on the same broker comes after.
	testtool.WaitFor(t, 10*time.Second, "a publish of the gateway's, once connected", func() bool { return any.Count() > 0 })
	connected := time.Now()
	testtool.WaitFor(t, 10*time.Second, "a probe while connected", func() bool {
		s := table.Snapshot()[idx]
		return s.ProbeRTT > 0 && s.ProbeAge < time.Since(connected)
	})
	marker := Subscribe(t, b.Addr(), "fieldlink-probe/marker")
	mc := Client(t, b.Addr(), "test-marker")
	if tok := mc.Publish("fieldlink-probe/marker", 1, false, "m"); !tok.WaitTimeout(10*time.Second) || tok.Error() != nil {
		t.Fatal(tok.Error())
	}
	testtool.WaitFor(t, 10*time.Second, "the marker arrives", func() bool { return marker.Count() == 1 })
	if n := sub.Count(); n != 1 {
		t.Errorf("%d messages under fieldlink-probe/, want the marker alone", n)
	}
}

// SiteErrs records a kind's reports on the site file (its CheckSite's
// site.File) as "field: message".
type SiteErrs []string

func (e *SiteErrs) Errorf(field, format string, args ...any) {
	*e = append(*e, field+": "+fmt.Sprintf(format, args...))
}

// Path is p as it is.
func (*SiteErrs) Path(p string) string { return p }

// Readable says every file is.
func (*SiteErrs) Readable(path string) error { return nil }
