package mqtt

import (
	"bufio"
	"bytes"
	"context"
	"fieldlink/uplink/mqtt/mqtttest"
	"fmt"
	"io"
	"net"
	"os"
	"runtime"
	"slices"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"testing/iotest"
	"time"

	"fieldlink/internal/testtool"
	"fieldlink/uplink"
)

// mqttRawPublisher is a client that streams PUBLISH packets of any size
// to a broker from a small buffer: the test process never holds a big
// payload itself, so its memory is the gateway side's.
type mqttRawPublisher struct {
	nc net.Conn
	br *bufio.Reader
}

func mqttRawConnect(t *testing.T, addr, id string) *mqttRawPublisher {
	t.Helper()
	nc, err := net.Dial("tcp", addr)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { nc.Close() })
	var vh bytes.Buffer
	vh.Write([]byte{0, 4, 'M', 'Q', 'T', 'T', 4, 2, 0, 60}) // 3.1.1, clean session, keep-alive 60 s
	vh.Write([]byte{byte(len(id) >> 8), byte(len(id))})
	vh.WriteString(id)
	pkt := append([]byte{0x10}, mqttRemainingLength(vh.Len())...)
	if _, err := nc.Write(append(pkt, vh.Bytes()...)); err != nil {
		t.Fatal(err)
	}
	p := &mqttRawPublisher{nc: nc, br: bufio.NewReader(nc)}
	ack, err := mqttReadPacket(p.br)
	if err != nil || len(ack) != 4 || ack[0] != 0x20 || ack[3] != 0 {
		t.Fatalf("CONNACK: % x, %v", ack, err)
	}
	// Nothing else comes back at QoS 0; keep the socket drained anyway.
	go func() { _, _ = io.Copy(io.Discard, p.br) }()
	return p
}

// publish sends a QoS 0 PUBLISH on topic whose payload is size bytes of
// fill, written 64 KiB at a time.
func (p *mqttRawPublisher) publish(t *testing.T, topic string, size int, fill byte) {
	t.Helper()
	var hdr bytes.Buffer
	hdr.WriteByte(0x30)
	hdr.Write(mqttRemainingLength(2 + len(topic) + size))
	hdr.Write([]byte{byte(len(topic) >> 8), byte(len(topic))})
	hdr.WriteString(topic)
	if _, err := p.nc.Write(hdr.Bytes()); err != nil {
		t.Fatal(err)
	}
	chunk := bytes.Repeat([]byte{fill}, 64<<10)
	for size > 0 {
		n := min(size, len(chunk))
		if _, err := p.nc.Write(chunk[:n]); err != nil {
			t.Fatal(err)
		}
		size -= n
	}
}

// procStatus returns a field of /proc/self/status in bytes (VmRSS, VmHWM).
func procStatus(t *testing.T, field string) uint64 {
	t.Helper()
	b, err := os.ReadFile("/proc/self/status")
	if err != nil {
		t.Fatal(err)
	}
	for l := range strings.Lines(string(b)) {
		if v, ok := strings.CutPrefix(l, field+":"); ok {
			kb, err := strconv.ParseUint(strings.TrimSuffix(strings.TrimSpace(v), " kB"), 10, 64)
			if err != nil {
				t.Fatal(err)
			}
			return kb << 10
		}
	}
	t.Fatalf("/proc/self/status has no %s", field)
	return 0
}

// A flood of 10 MB messages on the command topic, by any client of the
// broker, costs the gateway next to no memory: the connection drops each
// payload as it streams through, and counts and logs it; the command
// handler, busy meanwhile, is never handed one; packets go on being
// acknowledged during the flood, and a command of a normal size after it
// arrives.
func TestMQTTOversizeFloodHeldAtTheConnection(t *testing.T) {
	if runtime.GOOS != "linux" {
		t.Skip("reads the peak resident size from /proc/self/status")
	}
	b := mqtttest.Broker(t, mqtttest.BrokerOptions{})
	busy := make(chan struct{})
	var once sync.Once
	t.Cleanup(func() { once.Do(func() { close(busy) }) })
	var mu sync.Mutex
	var got []int
	log, logs := mqtttest.Logger(t)
	m, _ := mqttRun(t, mqttConfig{URL: b.URL(), Logger: log, Subscriptions: []uplink.Subscription{{Topic: "fieldlink/{site}/{gateway}/cmd", Handle: func(p []byte) {
		<-busy // the engine is busy with a write
		mu.Lock()
		got = append(got, len(p))
		mu.Unlock()
	}}}})
	mqtttest.WaitConnected(t, m.Connected, true)
	pub := mqttRawConnect(t, b.Addr(), "flooder")

	const floods, size = 20, 10 << 20
	runtime.GC()
	var before runtime.MemStats
	runtime.ReadMemStats(&before)
	if err := os.WriteFile("/proc/self/clear_refs", []byte("5"), 0); err != nil {
		t.Fatalf("resetting the peak resident size: %v", err)
	}
	rss := procStatus(t, "VmRSS")

	var published, failed atomic.Int64
	done := make(chan struct{})
	var wg sync.WaitGroup
	wg.Go(func() {
		for i := 0; ; i++ {
			select {
			case <-done:
				return
			default:
			}
			ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
			err := m.publish(ctx, map[string]string{"data_type": "gas", "device": "d"}, fmt.Appendf(nil, `{"i":%d}`, i))
			cancel()
			if err != nil {
				failed.Add(1)
				t.Errorf("publish during the flood: %v", err)
				return
			}
			published.Add(1)
		}
	})
	for range floods {
		pub.publish(t, "fieldlink/s1/gw1/cmd", size, 'x')
		// A packet goes out and is acknowledged behind each flood message.
		n := published.Load()
		testtool.WaitFor(t, 30*time.Second, "a packet acknowledged during the flood", func() bool { return published.Load() > n || failed.Load() > 0 })
	}
	peak := procStatus(t, "VmHWM")
	var after runtime.MemStats
	runtime.ReadMemStats(&after)
	alloc := after.TotalAlloc - before.TotalAlloc
	t.Logf("%d × %d MiB: resident %d MiB before, peak %d MiB; %d MiB allocated; %d packets acknowledged meanwhile",
		floods, size>>20, rss>>20, peak>>20, alloc>>20, published.Load())
	// VmHWM is kept up to date lazily and may read a little under an
	// earlier VmRSS: no growth then, not a wrapped-around difference.
	if peak > rss && peak-rss > 32<<20 {
		t.Errorf("the peak resident size grew by %d MiB during the flood, want under 32 MiB", (peak-rss)>>20)
	}
	if alloc > 32<<20 {
		t.Errorf("%d MiB allocated during a flood of %d MiB, want under 32 MiB", alloc>>20, floods*size>>20)
	}
	once.Do(func() { close(busy) })
	close(done)
	wg.Wait()
	pub.publish(t, "fieldlink/s1/gw1/cmd", 100, 'y')
	testtool.WaitFor(t, 30*time.Second, "the command after the flood", func() bool {
		mu.Lock()
		defer mu.Unlock()
		return len(got) > 0 && got[len(got)-1] == 100
	})
	if !strings.Contains(logs.String(), "message over the size limit refused") {
		t.Error("no refusal logged")
	}
	mu.Lock()
	defer mu.Unlock()
	for _, n := range got {
		if n != 100 {
			t.Errorf("the handler was handed a message of %d bytes, want only the command of 100", n)
		}
	}
	if st := m.Inbound(); st.Oversize != floods {
		t.Errorf("Inbound().Oversize = %d, want %d", st.Oversize, floods)
	}
}

// mqttTestPublish is a PUBLISH packet: flags (QoS 1 when id > 0), topic,
// packet id and payload.
func mqttTestPublish(topic string, id int, payload []byte) []byte {
	vh := []byte{byte(len(topic) >> 8), byte(len(topic))}
	vh = append(vh, topic...)
	first := byte(0x30)
	if id > 0 {
		first |= 2
		vh = append(vh, byte(id>>8), byte(id))
	}
	return append(append(append([]byte{first}, mqttRemainingLength(len(vh)+len(payload))...), vh...), payload...)
}

// The connection's reader hands paho every packet as it came but a
// PUBLISH over the limit, which it hands on with its topic and packet id
// (so a QoS 1 message is still acknowledged) and an empty payload, even
// when paho reads a byte at a time.
func TestMQTTLimitConnRewrites(t *testing.T) {
	big := bytes.Repeat([]byte{'x'}, 300) // a remaining length of two bytes
	in := slices.Concat(
		[]byte{0xd0, 0}, // PINGRESP
		mqttTestPublish("fieldlink/s1/gw1/cmd", 7, big), // over: QoS 1, id 7
		mqttTestPublish("a", 0, []byte("small")),
		mqttTestPublish("b", 9, bytes.Repeat([]byte{'y'}, 16)), // at the limit
		mqttTestPublish("c", 0, big),                           // over: QoS 0
		[]byte{0x40, 2, 0, 7},                                  // PUBACK
	)
	want := slices.Concat(
		[]byte{0xd0, 0},
		mqttTestPublish("fieldlink/s1/gw1/cmd", 7, nil),
		mqttTestPublish("a", 0, []byte("small")),
		mqttTestPublish("b", 9, bytes.Repeat([]byte{'y'}, 16)),
		mqttTestPublish("c", 0, nil),
		[]byte{0x40, 2, 0, 7},
	)
	for _, oneByte := range []bool{false, true} {
		a, b := net.Pipe()
		go func() {
			_, _ = b.Write(in)
			b.Close()
		}()
		var refused []string
		c := newMQTTLimitConn(a, 16, func(topic string, size int) { refused = append(refused, fmt.Sprint(topic, " ", size)) })
		var r io.Reader = c
		if oneByte {
			r = iotest.OneByteReader(c)
		}
		got, err := io.ReadAll(r)
		a.Close()
		if err != nil {
			t.Fatal(err)
		}
		if !bytes.Equal(got, want) {
			t.Errorf("one byte at a time %v: got\n% x\nwant\n% x", oneByte, got, want)
		}
		if w := []string{"fieldlink/s1/gw1/cmd 300", "c 300"}; !slices.Equal(refused, w) {
			t.Errorf("refused %q, want %q", refused, w)
		}
	}
}

// Through a real mosquitto, at QoS 1: a command over its subscription's
// 4 KiB but under the connection's limit (the load topic takes 64 KiB) is
// refused by the subscription, one over every limit by the connection;
// both are acknowledged on the same connection, and the next command is
// handled.
func TestMQTTOversizeQoS1(t *testing.T) {
	b := mqtttest.Broker(t, mqtttest.BrokerOptions{})
	var mu sync.Mutex
	var got []string
	m, _ := mqttRun(t, mqttConfig{URL: b.URL(), LoadTopic: "fieldlink/load", OnLoad: func([]byte) {},
		Subscriptions: []uplink.Subscription{{Topic: "fieldlink/{site}/{gateway}/cmd", Handle: func(p []byte) {
			mu.Lock()
			got = append(got, string(p))
			mu.Unlock()
		}}}})
	mqtttest.WaitConnected(t, m.Connected, true)
	c := m.cur.Load()
	pub := mqtttest.Client(t, b.Addr(), "platform")
	for _, p := range [][]byte{bytes.Repeat([]byte{'a'}, 10<<10), bytes.Repeat([]byte{'b'}, 100<<10), []byte("small")} {
		if tok := pub.Publish("fieldlink/s1/gw1/cmd", 1, false, p); !tok.WaitTimeout(5*time.Second) || tok.Error() != nil {
			t.Fatal(tok.Error())
		}
	}
	testtool.WaitFor(t, 10*time.Second, "the small command", func() bool {
		mu.Lock()
		defer mu.Unlock()
		return len(got) > 0
	})
	mu.Lock()
	defer mu.Unlock()
	if len(got) != 1 || got[0] != "small" {
		t.Errorf("handled %d messages, want only the small one", len(got))
	}
	if st := m.Inbound(); st.Oversize != 2 {
		t.Errorf("Inbound() = %+v, want 2 oversize", st)
	}
	if m.cur.Load() != c || !m.Connected() {
		t.Error("the connection was lost")
	}
}
