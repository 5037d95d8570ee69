package sparkplug

import (
	"bufio"
	"encoding/binary"
	"errors"
	"fmt"
	"io"
	"net"
	"sync"
	"testing"
)

// MQTT control packet types, as the Sparkplug conformance checks need
// them.
const (
	mqttCONNECT     = 1
	mqttPUBLISH     = 3
	mqttPUBACK      = 4
	mqttSUBSCRIBE   = 8
	mqttUNSUBSCRIBE = 10
	mqttDISCONNECT  = 14
)

// tckPacket is one MQTT control packet the node sent, read off the wire
// by tckProxy.
type tckPacket struct {
	conn int // the connection's number, from 1
	typ  byte
	// PUBLISH
	topic   string
	qos     byte
	retain  bool
	payload []byte
	// CONNECT
	level       byte // protocol level: 4 is MQTT 3.1.1
	clean, will bool
	willQoS     byte
	willRetain  bool
	willTopic   string
	willPayload []byte
	subs        map[string]byte // SUBSCRIBE: filter → QoS
	unsubs      []string        // UNSUBSCRIBE
}

// tckProxy stands between the node and the broker and records every
// packet the node sends, as the conformance kit's broker plugin does:
// the CONNECT's will and flags, each PUBLISH's QoS and retain flag, the
// subscriptions and the DISCONNECT.
type tckProxy struct {
	ln     net.Listener
	broker string
	wg     sync.WaitGroup

	mu    sync.Mutex
	conns int
	pkts  []tckPacket
}

func newTCKProxy(t *testing.T, broker string) *tckProxy {
	t.Helper()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	p := &tckProxy{ln: ln, broker: broker}
	p.wg.Go(p.accept)
	t.Cleanup(func() {
		_ = ln.Close()
		p.wg.Wait()
	})
	return p
}

func (p *tckProxy) URL() string { return "mqtt://" + p.ln.Addr().String() }

func (p *tckProxy) accept() {
	for {
		c, err := p.ln.Accept()
		if err != nil {
			return
		}
		b, err := net.Dial("tcp", p.broker)
		if err != nil {
			_ = c.Close()
			continue
		}
		p.mu.Lock()
		p.conns++
		n := p.conns
		p.mu.Unlock()
		p.wg.Go(func() {
			_, _ = io.Copy(c, b)
			_ = c.Close()
		})
		p.wg.Go(func() {
			p.relay(n, c, b)
			_ = b.Close()
		})
	}
}

// relay reads the node's packets, records them and forwards them as they
// are.
func (p *tckProxy) relay(n int, from io.Reader, to io.Writer) {
	r := bufio.NewReader(from)
	for {
		raw, hdr, body, err := readMQTTPacket(r)
		if err != nil {
			return
		}
		if pk, err := parseMQTTPacket(hdr, body); err == nil {
			pk.conn = n
			p.mu.Lock()
			p.pkts = append(p.pkts, pk)
			p.mu.Unlock()
		}
		if _, err := to.Write(raw); err != nil {
			return
		}
	}
}

// packets returns what the node sent so far.
func (p *tckProxy) packets() []tckPacket {
	p.mu.Lock()
	defer p.mu.Unlock()
	return append([]tckPacket(nil), p.pkts...)
}

func readMQTTPacket(r *bufio.Reader) (raw []byte, hdr byte, body []byte, err error) {
	hdr, err = r.ReadByte()
	if err != nil {
		return nil, 0, nil, err
	}
	raw = append(raw, hdr)
	n, mul := 0, 1
	for i := 0; ; i++ {
		b, err := r.ReadByte()
		if err != nil {
			return nil, 0, nil, err
		}
		raw = append(raw, b)
		n += int(b&0x7f) * mul
		mul *= 128
		if b&0x80 == 0 {
			break
		}
		if i == 3 {
			return nil, 0, nil, errors.New("remaining length too long")
		}
	}
	body = make([]byte, n)
	if _, err := io.ReadFull(r, body); err != nil {
		return nil, 0, nil, err
	}
	return append(raw, body...), hdr, body, nil
}

// mqttReader reads the fields of a packet's body.
type mqttReader struct {
	b   []byte
	err error
}

func (m *mqttReader) bytes(n int) []byte {
	if m.err != nil || len(m.b) < n {
		m.err = fmt.Errorf("short packet")
		return nil
	}
	v := m.b[:n]
	m.b = m.b[n:]
	return v
}

func (m *mqttReader) u16() int {
	v := m.bytes(2)
	if v == nil {
		return 0
	}
	return int(binary.BigEndian.Uint16(v))
}

func (m *mqttReader) str() []byte { return m.bytes(m.u16()) }

func parseMQTTPacket(hdr byte, body []byte) (tckPacket, error) {
	pk := tckPacket{typ: hdr >> 4}
	r := &mqttReader{b: body}
	switch pk.typ {
	case mqttCONNECT:
		r.str() // "MQTT"
		pk.level = r.bytes(1)[0]
		flags := r.bytes(1)[0]
		r.u16() // keep alive
		pk.clean, pk.will = flags&0x02 != 0, flags&0x04 != 0
		pk.willQoS, pk.willRetain = flags>>3&3, flags&0x20 != 0
		r.str() // client id
		if pk.will {
			pk.willTopic = string(r.str())
			pk.willPayload = append([]byte(nil), r.str()...)
		}
	case mqttPUBLISH:
		pk.retain, pk.qos = hdr&1 != 0, hdr>>1&3
		pk.topic = string(r.str())
		if pk.qos > 0 {
			r.u16()
		}
		pk.payload = append([]byte(nil), r.b...)
	case mqttSUBSCRIBE:
		r.u16()
		pk.subs = map[string]byte{}
		for len(r.b) > 0 && r.err == nil {
			f := string(r.str())
			q := r.bytes(1)
			if q != nil {
				pk.subs[f] = q[0]
			}
		}
	case mqttUNSUBSCRIBE:
		r.u16()
		for len(r.b) > 0 && r.err == nil {
			pk.unsubs = append(pk.unsubs, string(r.str()))
		}
	}
	return pk, r.err
}
