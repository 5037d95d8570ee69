//go:build cluster

package cluster

import (
	"bufio"
	"encoding/binary"
	"errors"
	"io"
	"net"
	"slices"
	"sync"
	"sync/atomic"
	"testing"
	"time"
)

// budget is a proxy in front of one node's MQTT listener that reads the
// MQTT stream: it times every QoS 1 PUBLISH to its PUBACK (from when the
// proxy read it, so a publish's wait in the proxy counts), counts the
// publishes it passes on, and, with a limit, passes on at most limit
// publishes a second over all its connections, in the order it read them:
// the rest wait in the proxy, and behind them whatever else their
// connection sends (a node at its limit: one queue served at a fixed
// rate). It counts the connections that end while it is measuring.
type budget struct {
	ln    net.Listener
	node  string
	limit int // publishes a second; 0: none

	mu        sync.Mutex
	next      time.Time // the next publish's turn
	lat       []time.Duration
	measuring bool
	conns     map[net.Conn]struct{}

	offered   atomic.Int64 // publishes read from the gateways
	published atomic.Int64 // publishes passed on
	lost      atomic.Int64 // connections ended while measuring
}

// newBudget starts a budget proxy to upstream on a loopback port the
// kernel gives it; it is closed when the test ends.
func newBudget(t *testing.T, node, upstream string, limit int) *budget {
	t.Helper()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	b := &budget{ln: ln, node: node, limit: limit, conns: map[net.Conn]struct{}{}}
	go b.accept(upstream)
	t.Cleanup(func() {
		ln.Close()
		b.mu.Lock()
		for c := range b.conns {
			c.Close()
		}
		b.mu.Unlock()
	})
	return b
}

// Addr is the proxy's address, for the gateways.
func (b *budget) Addr() string { return b.ln.Addr().String() }

// measure starts (on) or stops counting: latencies and lost connections
// from the start are kept, those before dropped.
func (b *budget) measure(on bool) {
	b.mu.Lock()
	defer b.mu.Unlock()
	if on {
		b.lat = b.lat[:0]
		b.lost.Store(0)
	}
	b.measuring = on
}

// latencies are the PUBLISH-to-PUBACK times measured, sorted.
func (b *budget) latencies() []time.Duration {
	b.mu.Lock()
	defer b.mu.Unlock()
	l := slices.Clone(b.lat)
	slices.Sort(l)
	return l
}

func (b *budget) accept(upstream string) {
	for {
		c, err := b.ln.Accept()
		if err != nil {
			return
		}
		u, err := net.DialTimeout("tcp", upstream, 5*time.Second)
		if err != nil {
			c.Close()
			continue
		}
		b.mu.Lock()
		b.conns[c], b.conns[u] = struct{}{}, struct{}{}
		b.mu.Unlock()
		sent := &sync.Map{} // packet id → when the proxy read the publish
		var once sync.Once
		end := func() {
			once.Do(func() {
				c.Close()
				u.Close()
				b.mu.Lock()
				delete(b.conns, c)
				delete(b.conns, u)
				if b.measuring {
					b.lost.Add(1)
				}
				b.mu.Unlock()
			})
		}
		go func() { defer end(); b.up(c, u, sent) }()
		go func() { defer end(); b.down(u, c, sent) }()
	}
}

// up copies the client's packets to the node, holding each PUBLISH for
// its turn.
func (b *budget) up(c, u net.Conn, sent *sync.Map) {
	r := bufio.NewReaderSize(c, 64<<10)
	for {
		p, err := readPacket(r)
		if err != nil {
			return
		}
		if p[0]>>4 == 3 { // PUBLISH
			if id, ok := publishID(p); ok {
				sent.Store(id, time.Now())
			}
			b.offered.Add(1)
			b.turn()
			b.published.Add(1)
		}
		if _, err := u.Write(p); err != nil {
			return
		}
	}
}

// turn waits for the next publish's turn under the limit.
func (b *budget) turn() {
	if b.limit <= 0 {
		return
	}
	b.mu.Lock()
	now := time.Now()
	at := now
	if b.next.After(now) {
		at = b.next
	}
	b.next = at.Add(time.Second / time.Duration(b.limit))
	b.mu.Unlock()
	time.Sleep(at.Sub(now))
}

// down copies the node's packets to the client, timing each PUBACK.
func (b *budget) down(u, c net.Conn, sent *sync.Map) {
	r := bufio.NewReaderSize(u, 64<<10)
	for {
		p, err := readPacket(r)
		if err != nil {
			return
		}
		if p[0]>>4 == 4 && len(p) >= 4 { // PUBACK
			id := binary.BigEndian.Uint16(p[len(p)-2:])
			if t, ok := sent.LoadAndDelete(id); ok {
				d := time.Since(t.(time.Time))
				b.mu.Lock()
				if b.measuring {
					b.lat = append(b.lat, d)
				}
				b.mu.Unlock()
			}
		}
		if _, err := c.Write(p); err != nil {
			return
		}
	}
}

// readPacket reads one MQTT control packet whole: its fixed header (type
// and flags, the remaining length) and the rest.
func readPacket(r *bufio.Reader) ([]byte, error) {
	h, err := r.ReadByte()
	if err != nil {
		return nil, err
	}
	hdr := []byte{h}
	n, shift := 0, 0
	for {
		x, err := r.ReadByte()
		if err != nil {
			return nil, err
		}
		hdr = append(hdr, x)
		n |= int(x&0x7f) << shift
		if x&0x80 == 0 {
			break
		}
		if shift += 7; shift > 21 {
			return nil, errors.New("mqtt: remaining length too long")
		}
	}
	p := make([]byte, len(hdr)+n)
	copy(p, hdr)
	if _, err := io.ReadFull(r, p[len(hdr):]); err != nil {
		return nil, err
	}
	return p, nil
}

// publishID is a QoS 1 or 2 PUBLISH's packet id (MQTT 3.1.1: after the
// topic); false at QoS 0.
func publishID(p []byte) (uint16, bool) {
	if (p[0]>>1)&3 == 0 {
		return 0, false
	}
	k := 1
	for p[k]&0x80 != 0 {
		k++
	}
	k++ // the variable header starts here
	if len(p) < k+2 {
		return 0, false
	}
	tl := int(binary.BigEndian.Uint16(p[k:]))
	if len(p) < k+2+tl+2 {
		return 0, false
	}
	return binary.BigEndian.Uint16(p[k+2+tl:]), true
}

// quantileOf is the q-quantile of sorted; -1 when it is empty.
func quantileOf(sorted []time.Duration, q float64) time.Duration {
	if len(sorted) == 0 {
		return -1
	}
	return sorted[min(int(q*float64(len(sorted))), len(sorted)-1)]
}
