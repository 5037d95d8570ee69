package mqtt

import (
	"bufio"
	"errors"
	"fieldlink/uplink/mqtt/mqtttest"
	"fmt"
	"io"
	"net"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	paho "github.com/eclipse/paho.mqtt.golang"
)

// Test helpers for the MQTT upstream: a real mosquitto started per test, a
// TCP relay that can swallow the broker's packets or cut the link, a paho
// subscriber, and a captured log.

// mqttRun makes the upstream, with a reconnect backoff of a few tens of
// milliseconds, runs it until the test ends and returns it with a function
// that stops Run and waits for it to return.
func mqttRun(t testing.TB, cfg mqttConfig) (*mqttUpstream, func()) {
	t.Helper()
	if cfg.Vars == nil {
		cfg.Vars = map[string]string{"site": "s1", "gateway": "gw1"}
	}
	if cfg.Logger == nil {
		cfg.Logger, _ = mqtttest.Logger(t)
	}
	m, err := newMQTT(cfg)
	if err != nil {
		t.Fatal(err)
	}
	m.backoffMin, m.backoffMax = 20*time.Millisecond, 200*time.Millisecond
	return m, mqtttest.Start(t, m.Run)
}

// mqttRetained returns the retained payload of topic ("" if none), as a new
// subscriber sees it.
func mqttRetained(t testing.TB, addr, topic string) string {
	t.Helper()
	got := make(chan string, 1)
	c := mqtttest.Client(t, addr, fmt.Sprintf("test-ret-%d", time.Now().UnixNano()))
	defer c.Disconnect(0)
	tok := c.Subscribe(topic, 1, func(_ paho.Client, m paho.Message) {
		if m.Retained() {
			select {
			case got <- string(m.Payload()):
			default:
			}
		}
	})
	if !tok.WaitTimeout(10*time.Second) || tok.Error() != nil {
		t.Fatalf("subscribe %s: %v", topic, tok.Error())
	}
	// A retained message comes before the SUBACK's effects settle; give it
	// a moment, since "none" has no event of its own.
	select {
	case p := <-got:
		return p
	case <-time.After(300 * time.Millisecond):
		return ""
	}
}

// mqttRelay is a TCP relay between the upstream and a broker that the test
// controls: it counts the PUBACKs it passes to the client, can swallow
// every packet from the broker (so no PUBACK arrives), refuse new
// connections, and cut the current ones.
type mqttRelay struct {
	t      testing.TB
	ln     net.Listener
	target string

	swallow atomic.Bool // drop broker→client packets
	refuse  atomic.Bool // close new connections at once
	// cutOn, if set, is a topic: a PUBLISH on it from the client has the
	// relay close the connection instead of passing it on, as a broker
	// that enforces its ACL by disconnecting does.
	cutOn       atomic.Pointer[string]
	cutsOnTopic atomic.Int64 // connections closed so
	// stallFor, if positive, has the relay hold back every PUBACK and
	// close the connection that long after the first it held back, as a
	// NATS node does when its stream cannot store a publish in time (a
	// leader change): the broker's answer is a closed connection.
	stallFor atomic.Int64
	stalls   atomic.Int64 // connections closed so
	pubacks  atomic.Int64 // PUBACKs passed to the client
	swallowd atomic.Int64 // packets dropped

	mu    sync.Mutex
	conns map[net.Conn]struct{}
	wg    sync.WaitGroup
}

func mqttStartRelay(t testing.TB, target string) *mqttRelay {
	t.Helper()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	r := &mqttRelay{t: t, ln: ln, target: target, conns: map[net.Conn]struct{}{}}
	r.wg.Add(1)
	go r.accept()
	t.Cleanup(r.close)
	return r
}

func (r *mqttRelay) url() string { return "mqtt://" + r.ln.Addr().String() }

func (r *mqttRelay) accept() {
	defer r.wg.Done()
	for {
		down, err := r.ln.Accept()
		if err != nil {
			return
		}
		if r.refuse.Load() {
			down.Close()
			continue
		}
		up, err := net.DialTimeout("tcp", r.target, 5*time.Second)
		if err != nil {
			down.Close()
			continue
		}
		r.mu.Lock()
		r.conns[down], r.conns[up] = struct{}{}, struct{}{}
		r.mu.Unlock()
		r.wg.Add(2)
		go func() { // client → broker, packet by packet
			defer r.wg.Done()
			r.pumpUp(up, down)
			r.closePair(up, down)
		}()
		go func() { // broker → client, packet by packet
			defer r.wg.Done()
			r.pumpDown(up, down)
			r.closePair(up, down)
		}()
	}
}

func (r *mqttRelay) pumpUp(up, down net.Conn) {
	br := bufio.NewReader(down)
	for {
		pkt, err := mqttReadPacket(br)
		if err != nil {
			return
		}
		if topic := r.cutOn.Load(); topic != nil && mqttPublishTopic(pkt) == *topic {
			r.cutsOnTopic.Add(1)
			return
		}
		if _, err := up.Write(pkt); err != nil {
			return
		}
	}
}

// mqttPublishTopic is the topic of a PUBLISH packet, "" for other packets.
func mqttPublishTopic(pkt []byte) string {
	if pkt[0]>>4 != 3 {
		return ""
	}
	i := 1
	for pkt[i]&0x80 != 0 { // remaining length
		i++
	}
	i++
	if len(pkt) < i+2 {
		return ""
	}
	n := int(pkt[i])<<8 | int(pkt[i+1])
	if len(pkt) < i+2+n {
		return ""
	}
	return string(pkt[i+2 : i+2+n])
}

func (r *mqttRelay) pumpDown(up, down net.Conn) {
	br := bufio.NewReader(up)
	stalled := false
	for {
		pkt, err := mqttReadPacket(br)
		if err != nil {
			return
		}
		if r.swallow.Load() {
			r.swallowd.Add(1)
			continue
		}
		if d := time.Duration(r.stallFor.Load()); d > 0 && pkt[0]>>4 == 4 {
			if !stalled {
				stalled = true
				time.AfterFunc(d, func() {
					r.stalls.Add(1)
					r.closePair(up, down)
				})
			}
			continue
		}
		// Count a PUBACK before the client can see it, so that a test that
		// reads the count after publish returned never finds it behind;
		// uncount it if it never got out.
		puback := pkt[0]>>4 == 4
		if puback {
			r.pubacks.Add(1)
		}
		if _, err := down.Write(pkt); err != nil {
			if puback {
				r.pubacks.Add(-1)
			}
			return
		}
	}
}

// mqttReadPacket reads one MQTT control packet: fixed header, remaining
// length, body.
func mqttReadPacket(br *bufio.Reader) ([]byte, error) {
	h, err := br.ReadByte()
	if err != nil {
		return nil, err
	}
	pkt := []byte{h}
	n, mul := 0, 1
	for i := 0; ; i++ {
		b, err := br.ReadByte()
		if err != nil {
			return nil, err
		}
		pkt = append(pkt, b)
		n += int(b&0x7f) * mul
		mul *= 128
		if b&0x80 == 0 {
			break
		}
		if i == 3 {
			return nil, errors.New("bad remaining length")
		}
	}
	body := make([]byte, n)
	if _, err := io.ReadFull(br, body); err != nil {
		return nil, err
	}
	return append(pkt, body...), nil
}

func (r *mqttRelay) closePair(a, b net.Conn) {
	r.mu.Lock()
	delete(r.conns, a)
	delete(r.conns, b)
	r.mu.Unlock()
	a.Close()
	b.Close()
}

// cut closes every relayed connection, without a DISCONNECT: to both ends
// it looks like a broken link.
func (r *mqttRelay) cut() {
	r.mu.Lock()
	defer r.mu.Unlock()
	for c := range r.conns {
		c.Close()
	}
}

func (r *mqttRelay) close() {
	r.ln.Close()
	r.cut()
	r.wg.Wait()
}
