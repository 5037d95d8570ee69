package agent

import (
	"fmt"
	"strings"
	"sync"
	"testing"
	"time"

	"fieldlink/internal/testtool"
	"fieldlink/internal/testtool/emutest"
	"fieldlink/sensors/emulator"
	"fieldlink/sparkplug"
	"fieldlink/sparkplug/sparkplugtest"
	uplinksparkplug "fieldlink/uplink/sparkplug"
)

// spServer is one broker of a multi-server test: the host's STATE on it,
// and every message of the node it carried, in order.
type spServer struct {
	name string
	host *platform
	mu   sync.Mutex
	msgs []spMsg
}

type spMsg struct {
	topic   string
	payload []byte
}

func newSPServer(t *testing.T, name, addr string) *spServer {
	t.Helper()
	s := &spServer{name: name, host: newPlatform(t, addr)}
	platformSubscribe(t, s.host, "spBv1.0/farm/+/gw-sp/#", func(topic string, payload []byte) {
		if strings.Contains(topic, "/NCMD/") || strings.Contains(topic, "/DCMD/") {
			return
		}
		s.mu.Lock()
		s.msgs = append(s.msgs, spMsg{topic, payload})
		s.mu.Unlock()
	})
	return s
}

// state publishes the primary host's retained STATE on the server.
func (s *spServer) state(t *testing.T, online bool) {
	t.Helper()
	p := fmt.Sprintf(`{"online":%v,"timestamp":%d}`, online, time.Now().UnixMilli())
	s.host.c.Publish(t, "spBv1.0/STATE/scada", []byte(p), true)
}

func (s *spServer) got() []spMsg {
	s.mu.Lock()
	defer s.mu.Unlock()
	return append([]spMsg(nil), s.msgs...)
}

func (s *spServer) count(typ string) int {
	n := 0
	for _, m := range s.got() {
		if strings.Contains(m.topic, "/"+typ+"/") {
			n++
		}
	}
	return n
}

// TestTCK_multiple_servers runs a gateway whose site file lists two
// Sparkplug upstreams of one node (same group, same edge node), both
// with the primary host online: the node is born on the first only and
// sends its data there alone. When the host's STATE goes offline there
// (and is offline on the second too), the node leaves, and packets wait
// in the buffer; once the host is online on the second server, the node
// is born there and sends what was kept, is_historical, oldest first,
// then live readings. Tahu decodes every DDATA.
func TestTCK_multiple_servers(t *testing.T) {
	tahu := sparkplugtest.NewTahu(t)
	mosq := testtool.FindMosquitto(t)
	ba, bb := testtool.NewMosquitto(t, mosq), testtool.NewMosquitto(t, mosq)
	_, addr := emutest.ServeDevices(t, false, emutest.Devices(t, "generic-irrigation-valve"), emulator.Options{Seed: 1})
	a, b := newSPServer(t, "first", ba.Addr()), newSPServer(t, "second", bb.Addr())
	a.state(t, true)
	b.state(t, true)

	_, g, _ := startSparkplugGateway(t, "gw-sp", addr, false, "group_id: farm, primary_host: scada", ba.URL(), bb.URL())

	// operational-behavior-primary-application-state-with-multiple-servers-single-server:
	// born on one server only, its data there alone.
	testtool.WaitFor(t, 15*time.Second, "three DDATA on the first server", func() bool { return a.count("DDATA") >= 3 })
	t.Run("operational-behavior-primary-application-state-with-multiple-servers-single-server", func(t *testing.T) {
		if n := b.count("NBIRTH"); n != 0 {
			t.Fatalf("single-server: %d NBIRTH on the second server while the node is born on the first", n)
		}
		if n := b.count("DDATA"); n != 0 {
			t.Fatalf("single-server: %d DDATA on the second server while the node is born on the first", n)
		}
	})

	// operational-behavior-primary-application-state-with-multiple-servers-walk:
	// the host goes offline on both; the node leaves the first (its
	// NDEATH), is born nowhere, and packets wait in the buffer.
	b.state(t, false)
	a.state(t, false)
	testtool.WaitFor(t, 15*time.Second, "the NDEATH on the first server", func() bool { return a.count("NDEATH") >= 1 })
	testtool.WaitFor(t, 15*time.Second, "three packets kept in the buffer", func() bool { return g.q.Len() >= 3 })
	kept := g.q.Len()
	t.Run("operational-behavior-edge-node-birth-sequence-wait", func(t *testing.T) {
		if n := b.count("NBIRTH"); n != 0 {
			t.Fatalf("birth-sequence-wait: %d NBIRTH on the second server, whose STATE says offline", n)
		}
	})
	firstBirths := a.count("NBIRTH")

	// The host is back on the second server: births there, then what was
	// kept, historical, oldest first, then live data.
	b.state(t, true)
	t.Run("operational-behavior-primary-application-state-with-multiple-servers-walk", func(t *testing.T) { spWalked(t, tahu, a, b, firstBirths, kept) })
}

// spWalked checks that the node, its host offline on the first server,
// was born on the second and sent there what it kept, historical, oldest
// first, then live data.
func spWalked(t *testing.T, tahu *sparkplugtest.Tahu, a, b *spServer, firstBirths, kept int) {
	testtool.WaitFor(t, 30*time.Second, "the kept packets and two live ones on the second server", func() bool {
		live := 0
		for _, m := range b.got() {
			if strings.Contains(m.topic, "/DDATA/") {
				p, err := sparkplug.Unmarshal(m.payload)
				if err == nil && len(p.Metrics) > 0 && !p.Metrics[0].Historical {
					live++
				}
			}
		}
		return live >= 2
	})
	if n := a.count("NBIRTH"); n != firstBirths {
		t.Errorf("single-server: %d NBIRTH on the first server after the walk, want %d (its STATE says offline)", n, firstBirths)
	}
	// The node came by while the host was offline there: what it left
	// then was its NDEATHs, never a birth.
	got := b.got()
	for len(got) > 0 && strings.Contains(got[0].topic, "/NDEATH/") {
		got = got[1:]
	}
	if len(got) < 2 || !strings.HasSuffix(got[0].topic, "/NBIRTH/gw-sp") || !strings.HasSuffix(got[1].topic, "/DBIRTH/gw-sp/valve-1") {
		t.Fatalf("first messages on the second server %s, %s: want NBIRTH then DBIRTH", got[0].topic, got[1].topic)
	}
	payloads := make([][]byte, len(got))
	for i := range got {
		payloads[i] = got[i].payload
	}
	decoded := tahu.Decode(t, payloads...)
	aliases := map[string]string{}
	for _, m := range decoded[1].Metrics {
		aliases[*m.Name] = *m.Alias
	}
	hist, live, lastSeq := 0, 0, -1
	for i, p := range decoded[2:] {
		if !strings.Contains(got[i+2].topic, "/DDATA/") {
			continue
		}
		var seq string
		h := false
		for _, m := range p.Metrics {
			if m.Alias != nil && *m.Alias == aliases[uplinksparkplug.PacketSeq] {
				seq = strings.Trim(string(m.Value), `"`)
				h = m.IsHistorical != nil && *m.IsHistorical
			}
		}
		var n int
		fmt.Sscan(seq, &n)
		if n <= lastSeq {
			t.Errorf("DDATA %d: packet Seq %s after %d: want oldest first", i, seq, lastSeq)
		}
		lastSeq = n
		switch {
		case h && live > 0:
			t.Errorf("DDATA %d (Seq %s): historical after a live one", i, seq)
		case h:
			hist++
		default:
			live++
		}
	}
	if hist < kept {
		t.Errorf("%d historical DDATA on the second server, want at least the %d packets kept", hist, kept)
	}
}
