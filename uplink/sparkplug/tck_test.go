package sparkplug

import (
	"context"
	"fieldlink/uplink/mqtt/mqtttest"
	"fmt"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"fieldlink/buffer"
	"fieldlink/internal/testtool"
	"fieldlink/packet"
	spb "fieldlink/sparkplug"
	"fieldlink/sparkplug/sparkplugtest"

	paho "github.com/eclipse/paho.mqtt.golang"
)

// tckRun is what one session of the node, run through every step the
// conformance kit's edge node tests take, left behind: the packets it
// sent (read off the wire between it and the broker), the will the
// broker published for it, the DCMDs it handed on, and Tahu's decoding
// of every payload it published.
type tckRun struct {
	pkts    []tckPacket
	pubs    []tckPacket             // the node's PUBLISHes, in order
	dec     []sparkplugtest.Payload // Tahu's decoding of pubs[i]
	wills   []spMessage             // NDEATHs the broker published for the node
	cmds    []Command               // DCMDs handed to OnCommand
	marks   map[string]int          // index in pubs where a step began
	connPub map[int][]int           // by connection: indexes in pubs
}

// tckScenario runs the node against mosquitto, through a proxy that
// records what it sends, with primary host "scada":
//
//  1. connect with the host's retained STATE offline (timestamp 100); a
//     STATE online of another host, then one online older than 100: no
//     birth;
//  2. STATE online (200): NBIRTH, DBIRTHs; then 300 DDATA (seq wraps);
//  3. a device dies and comes back: DDEATH, DBIRTH;
//  4. an NCMD rebirth (Tahu-encoded): NBIRTH, DBIRTHs, same bdSeq;
//  5. a DCMD (Tahu-encoded, by alias) reaches OnCommand;
//  6. STATE offline older than the online one (150): nothing; newer
//     (300): the node drops the connection, the broker publishes the
//     will; it connects again and waits;
//  7. STATE online (400): births on the new connection, bdSeq 1;
//  8. a clean stop: NDEATH, then DISCONNECT.
func tckScenario(t *testing.T, tahu *sparkplugtest.Tahu) *tckRun {
	t.Helper()
	b := mqtttest.Broker(t, mqtttest.BrokerOptions{})
	px := newTCKProxy(t, b.Addr())
	r := &tckRun{marks: map[string]int{}, connPub: map[int][]int{}}

	var mu sync.Mutex
	watcher := mqtttest.Client(t, b.Addr(), "tck-watcher")
	if tok := watcher.Subscribe("spBv1.0/farm/NDEATH/gw1", 1, func(_ paho.Client, m paho.Message) {
		mu.Lock()
		r.wills = append(r.wills, spMessage{m.Topic(), append([]byte(nil), m.Payload()...)})
		mu.Unlock()
	}); !tok.WaitTimeout(10*time.Second) || tok.Error() != nil {
		t.Fatalf("subscribe: %v", tok.Error())
	}
	host := mqtttest.Client(t, b.Addr(), "scada")
	publish := func(topic string, payload []byte, retained bool) {
		t.Helper()
		if tok := host.Publish(topic, 1, retained, payload); !tok.WaitTimeout(5*time.Second) || tok.Error() != nil {
			t.Fatal(tok.Error())
		}
	}
	state := func(id string, online bool, ts int64) {
		t.Helper()
		publish("spBv1.0/STATE/"+id, fmt.Appendf(nil, `{"online":%v,"timestamp":%d}`, online, ts), true)
	}
	pubs := func() []tckPacket {
		var out []tckPacket
		for _, p := range px.packets() {
			if p.typ == mqttPUBLISH {
				out = append(out, p)
			}
		}
		return out
	}
	waitPubs := func(n int, what string) {
		t.Helper()
		testtool.WaitFor(t, 15*time.Second, what, func() bool { return len(pubs()) >= n })
	}

	state("scada", false, 100)
	log, logBuf := mqtttest.Logger(t)
	conn, sp := spOpen(t, log, px.URL(), Config{GroupID: "farm", EdgeNode: "gw1", PrimaryHost: "scada", Devices: spTestDevices,
		OnCommand: func(_ context.Context, c Command) {
			mu.Lock()
			r.cmds = append(r.cmds, c)
			mu.Unlock()
		}}, 64)
	stop := mqtttest.Start(t, conn.Run)
	ctx := context.Background()

	// 1. Waiting for the host.
	testtool.WaitFor(t, 15*time.Second, "the node's subscriptions", func() bool {
		for _, p := range px.packets() {
			if p.typ == mqttSUBSCRIBE {
				return true
			}
		}
		return false
	})
	state("other", true, 300)
	state("scada", true, 50)
	testtool.WaitFor(t, 15*time.Second, "the STATE older than the latest ignored", func() bool {
		return strings.Contains(logBuf.String(), "Sparkplug STATE older than the latest: ignored")
	})
	r.marks["before-online"] = len(pubs())

	// 2. Births, then data.
	state("scada", true, 200)
	waitPubs(3, "NBIRTH and two DBIRTHs")
	testtool.WaitFor(t, 15*time.Second, "the sender up", sp.Up)
	r.marks["data"] = len(pubs())
	at := time.Now().Add(-time.Second).Truncate(time.Second)
	var batch []buffer.Record
	for i := range 300 {
		dev, fields := "rain-1", []packet.Field{{Name: "Level", Value: packet.Float(float64(i)/2, 1)}, {Name: "Count", Value: packet.Uint(uint64(i))}, {Name: "Heater", Value: packet.Bool(i%2 == 0)}}
		if i%3 == 2 {
			dev, fields = "gas-1", []packet.Field{{Name: "CH4", Value: packet.Float(1.5, 1)}}
		}
		p := packet.Packet{At: at, DeviceID: dev, Seq: uint64(i + 1), Epoch: "e1", Fields: fields}
		batch = append(batch, spRecordOf(t, &p))
		if len(batch) == 50 {
			if err := sp.Send(ctx, batch); err != nil {
				t.Fatalf("Send: %v", err)
			}
			batch = nil
		}
	}
	waitPubs(r.marks["data"]+300, "300 DDATA")

	// 3. A device's death and return.
	r.marks["ddeath"] = len(pubs())
	if err := sp.SetOnline(ctx, "gas-1", false); err != nil {
		t.Fatal(err)
	}
	if err := sp.SetOnline(ctx, "gas-1", true); err != nil {
		t.Fatal(err)
	}
	waitPubs(r.marks["ddeath"]+2, "DDEATH and DBIRTH")

	// 4. A rebirth request.
	r.marks["rebirth"] = len(pubs())
	ncmd := tahu.Encode(t, map[string]any{"timestamp": time.Now().UnixMilli(), "metrics": []map[string]any{
		{"name": "Node Control/Rebirth", "type": "Boolean", "value": true}}})[0]
	publish("spBv1.0/farm/NCMD/gw1", ncmd, false)
	waitPubs(r.marks["rebirth"]+3, "the births after the rebirth request")

	// 5. A DCMD by alias (3: rain-1's Heater).
	dcmd := tahu.Encode(t, map[string]any{"timestamp": time.Now().UnixMilli(), "metrics": []map[string]any{
		{"alias": 3, "type": "Boolean", "value": true}}})[0]
	publish("spBv1.0/farm/DCMD/gw1/rain-1", dcmd, false)
	testtool.WaitFor(t, 15*time.Second, "the DCMD handed on", func() bool {
		mu.Lock()
		defer mu.Unlock()
		return len(r.cmds) > 0
	})

	// 6. Offline STATEs: an older one is ignored, a newer one ends the
	// session.
	state("scada", false, 150)
	testtool.WaitFor(t, 15*time.Second, "the older offline STATE ignored", func() bool {
		return strings.Count(logBuf.String(), "Sparkplug STATE older than the latest: ignored") >= 2
	})
	r.marks["still-up"] = len(px.packets())
	if !sp.Up() {
		t.Error("termination-host-offline-timestamp: the node left its session on an offline STATE older than the online one")
	}
	state("scada", false, 300)
	testtool.WaitFor(t, 15*time.Second, "the will", func() bool {
		mu.Lock()
		defer mu.Unlock()
		return len(r.wills) > 0
	})
	testtool.WaitFor(t, 15*time.Second, "a second CONNECT", func() bool {
		px.mu.Lock()
		defer px.mu.Unlock()
		return px.conns >= 2
	})

	// 7. The host back: births on the new connection.
	r.marks["second"] = len(pubs())
	state("scada", true, 400)
	waitPubs(r.marks["second"]+3, "the births on the new connection")
	testtool.WaitFor(t, 15*time.Second, "the sender up again", sp.Up)

	// 8. A clean stop.
	r.marks["stop"] = len(pubs())
	stop()
	testtool.WaitFor(t, 15*time.Second, "the DISCONNECT", func() bool {
		pk := px.packets()
		return len(pk) > 0 && pk[len(pk)-1].typ == mqttDISCONNECT
	})

	r.pkts = px.packets()
	var payloads [][]byte
	var spIdx []int // the publishes on Sparkplug topics, which Tahu decodes
	for _, p := range r.pkts {
		if p.typ == mqttPUBLISH {
			if strings.HasPrefix(p.topic, "spBv1.0/farm/") {
				spIdx = append(spIdx, len(r.pubs))
				payloads = append(payloads, p.payload)
			}
			r.connPub[p.conn] = append(r.connPub[p.conn], len(r.pubs))
			r.pubs = append(r.pubs, p)
		}
	}
	r.dec = make([]sparkplugtest.Payload, len(r.pubs))
	for k, p := range tahu.Decode(t, payloads...) {
		r.dec[spIdx[k]] = p
	}
	mu.Lock()
	defer mu.Unlock()
	r.wills = append([]spMessage(nil), r.wills...)
	r.cmds = append([]Command(nil), r.cmds...)
	return r
}

// typ is the Sparkplug message type of publish i ("" for another topic).
func (r *tckRun) typ(i int) string {
	_, typ, _, _, err := spb.ParseTopic(r.pubs[i].topic)
	if err != nil {
		return ""
	}
	return string(typ)
}

// of returns the indexes of the node's publishes of message type typ.
func (r *tckRun) of(typ string) []int {
	var out []int
	for i := range r.pubs {
		if r.typ(i) == typ {
			out = append(out, i)
		}
	}
	return out
}

func (r *tckRun) connects() []tckPacket {
	var out []tckPacket
	for _, p := range r.pkts {
		if p.typ == mqttCONNECT {
			out = append(out, p)
		}
	}
	return out
}

// bdSeq of a decoded payload's bdSeq metric, or -1.
func tckBdSeq(p sparkplugtest.Payload) int {
	for _, m := range p.Metrics {
		if m.Name != nil && *m.Name == spb.BdSeq {
			n, err := strconv.Atoi(strings.Trim(string(m.Value), `"`))
			if err == nil {
				return n
			}
		}
	}
	return -1
}

func tckSeq(p sparkplugtest.Payload) int {
	if p.Seq == nil {
		return -1
	}
	n, err := strconv.Atoi(*p.Seq)
	if err != nil {
		return -1
	}
	return n
}

// tckCheck is one requirement of the conformance kit and how the run
// shows it is met.
type tckCheck struct {
	id    string
	check func(t *testing.T, r *tckRun)
}

// eachOf checks f for every publish of the given types.
func eachOf(types []string, f func(t *testing.T, r *tckRun, i int)) func(t *testing.T, r *tckRun) {
	return func(t *testing.T, r *tckRun) {
		n := 0
		for _, typ := range types {
			for _, i := range r.of(typ) {
				n++
				f(t, r, i)
			}
		}
		if n == 0 {
			t.Errorf("no %v published: nothing to check", types)
		}
	}
}

func qos0NotRetained(types ...string) func(t *testing.T, r *tckRun) {
	return eachOf(types, func(t *testing.T, r *tckRun, i int) {
		if p := r.pubs[i]; p.qos != 0 || p.retain {
			t.Errorf("publish %d (%s): QoS %d retain %v, want QoS 0, not retained", i, p.topic, p.qos, p.retain)
		}
	})
}

func notRetained(types ...string) func(t *testing.T, r *tckRun) {
	return eachOf(types, func(t *testing.T, r *tckRun, i int) {
		if p := r.pubs[i]; p.retain {
			t.Errorf("publish %d (%s): retained", i, p.topic)
		}
	})
}

func topicForm(typ string, device bool) func(t *testing.T, r *tckRun) {
	return eachOf([]string{typ}, func(t *testing.T, r *tckRun, i int) {
		want := "spBv1.0/farm/" + typ + "/gw1"
		got := r.pubs[i].topic
		if device {
			dev, ok := strings.CutPrefix(got, want+"/")
			if !ok || (dev != "rain-1" && dev != "gas-1") {
				t.Errorf("publish %d: topic %s, want %s/<device>", i, got, want)
			}
			return
		}
		if got != want {
			t.Errorf("publish %d: topic %s, want %s", i, got, want)
		}
	})
}

func hasTimestamp(types ...string) func(t *testing.T, r *tckRun) {
	return eachOf(types, func(t *testing.T, r *tckRun, i int) {
		ts := r.dec[i].Timestamp
		if ts == nil {
			t.Errorf("publish %d (%s): no payload timestamp", i, r.pubs[i].topic)
			return
		}
		ms, _ := strconv.ParseInt(*ts, 10, 64)
		if d := time.Since(time.UnixMilli(ms)); d < 0 || d > time.Hour {
			t.Errorf("publish %d (%s): payload timestamp %s is not the time of publishing (UTC ms)", i, r.pubs[i].topic, *ts)
		}
	})
}

// seqFollows checks that every publish of the types has a seq one more
// than the node's previous publish (mod 256), NBIRTH 0.
func seqFollows(types ...string) func(t *testing.T, r *tckRun) {
	return eachOf(types, func(t *testing.T, r *tckRun, i int) {
		s := tckSeq(r.dec[i])
		if r.typ(i) == string(spb.NBIRTH) {
			if s != 0 {
				t.Errorf("publish %d: NBIRTH seq %d, want 0", i, s)
			}
			return
		}
		prev := -1
		for j := i - 1; j >= 0; j-- {
			if r.pubs[j].conn != r.pubs[i].conn {
				break
			}
			if typ := r.typ(j); typ != string(spb.NDEATH) && typ != "" {
				prev = tckSeq(r.dec[j])
				break
			}
		}
		if prev < 0 || s != (prev+1)%256 {
			t.Errorf("publish %d (%s): seq %d after %d, want %d", i, r.pubs[i].topic, s, prev, (prev+1)%256)
		}
	})
}

func hasSeq(types ...string) func(t *testing.T, r *tckRun) {
	return eachOf(types, func(t *testing.T, r *tckRun, i int) {
		if s := tckSeq(r.dec[i]); s < 0 || s > 255 {
			t.Errorf("publish %d (%s): seq %v, want 0..255", i, r.pubs[i].topic, r.dec[i].Seq)
		}
	})
}

func noSeq(types ...string) func(t *testing.T, r *tckRun) {
	return eachOf(types, func(t *testing.T, r *tckRun, i int) {
		if r.dec[i].Seq != nil {
			t.Errorf("publish %d (%s): seq %s, want none", i, r.pubs[i].topic, *r.dec[i].Seq)
		}
	})
}

// birthMetrics checks every metric of every NBIRTH and DBIRTH.
func birthMetrics(f func(t *testing.T, i int, m sparkplugtest.Metric)) func(t *testing.T, r *tckRun) {
	return eachOf([]string{string(spb.NBIRTH), string(spb.DBIRTH)}, func(t *testing.T, r *tckRun, i int) {
		for _, m := range r.dec[i].Metrics {
			f(t, i, m)
		}
	})
}

func dataMetrics(f func(t *testing.T, i int, m sparkplugtest.Metric)) func(t *testing.T, r *tckRun) {
	return eachOf([]string{string(spb.DDATA)}, func(t *testing.T, r *tckRun, i int) {
		for _, m := range r.dec[i].Metrics {
			f(t, i, m)
		}
	})
}

// birthsThenData checks that on each connection nothing but an NDEATH
// comes before its first NBIRTH, and that every NBIRTH is followed at
// once by a DBIRTH of each device: no DDATA or DDEATH comes before the
// births.
func birthsThenData(t *testing.T, r *tckRun) {
	for c, idx := range r.connPub {
		born := false
		for k, i := range idx {
			switch r.typ(i) {
			case string(spb.NBIRTH):
				born = true
				if k+2 >= len(idx) || r.typ(idx[k+1]) != string(spb.DBIRTH) || r.typ(idx[k+2]) != string(spb.DBIRTH) {
					t.Errorf("connection %d: NBIRTH (publish %d) not followed by the two DBIRTHs", c, i)
				}
			case string(spb.NDEATH):
			default:
				if !born {
					t.Errorf("connection %d: %s (publish %d) before the NBIRTH", c, r.pubs[i].topic, i)
				}
			}
		}
	}
}

// willBdSeq is the bdSeq of a CONNECT's will.
func willBdSeq(t *testing.T, tahu *sparkplugtest.Tahu, c tckPacket) int {
	return tckBdSeq(tahu.Decode(t, c.willPayload)[0])
}

// TestTCK runs the node once through every step of the conformance kit's
// edge node tests (tckScenario) and checks each requirement the kit
// tests for an edge node, one subtest per requirement id (Sparkplug 3.0
// "tck-id-…"). docs/sparkplug.md lists them, and those that do not
// apply to this node with why.
func TestTCK(t *testing.T) {
	tahu := sparkplugtest.NewTahu(t)
	r := tckScenario(t, tahu)
	N, D := string(spb.NBIRTH), string(spb.DBIRTH)
	DD, DX, ND := string(spb.DDATA), string(spb.DDEATH), string(spb.NDEATH)

	willChecks := func(f func(t *testing.T, c tckPacket)) func(t *testing.T, r *tckRun) {
		return func(t *testing.T, r *tckRun) {
			cs := r.connects()
			if len(cs) < 2 {
				t.Fatalf("%d CONNECTs, want 2", len(cs))
			}
			for _, c := range cs {
				f(t, c)
			}
		}
	}
	// bdSeqOfBirths checks each NBIRTH's bdSeq against its connection's will.
	bdSeqOfBirths := func(t *testing.T, r *tckRun) {
		wills := map[int]int{}
		for _, c := range r.connects() {
			wills[c.conn] = willBdSeq(t, tahu, c)
		}
		for _, i := range r.of(N) {
			if got, want := tckBdSeq(r.dec[i]), wills[r.pubs[i].conn]; got != want || got < 0 {
				t.Errorf("NBIRTH %d: bdSeq %d, the will of its CONNECT says %d", i, got, want)
			}
		}
	}
	rebirthMetric := func(t *testing.T, r *tckRun) {
		for _, i := range r.of(N) {
			found := false
			for _, m := range r.dec[i].Metrics {
				if m.Name != nil && *m.Name == spb.Rebirth {
					found = true
					if m.Type != "Boolean" || string(m.Value) != "false" {
						t.Errorf("NBIRTH %d: Node Control/Rebirth %s %s, want Boolean false", i, m.Type, m.Value)
					}
					if m.Alias != nil {
						t.Errorf("NBIRTH %d: Node Control/Rebirth has alias %s", i, *m.Alias)
					}
				}
			}
			if !found {
				t.Errorf("NBIRTH %d: no Node Control/Rebirth", i)
			}
		}
	}
	hasSub := func(filter string) func(t *testing.T, r *tckRun) {
		return func(t *testing.T, r *tckRun) {
			for c := range len(r.connects()) {
				found := false
				for _, p := range r.pkts {
					if p.conn == c+1 && p.typ == mqttSUBSCRIBE {
						if q, ok := p.subs[filter]; ok {
							found = true
							if q != 1 {
								t.Errorf("connection %d: %s subscribed at QoS %d, want 1", c+1, filter, q)
							}
						}
					}
				}
				if !found {
					t.Errorf("connection %d: no subscription to %s", c+1, filter)
				}
			}
		}
	}
	firstPublishIsBirth := func(t *testing.T, r *tckRun) {
		for c, idx := range r.connPub {
			if len(idx) == 0 {
				continue
			}
			if typ := r.typ(idx[0]); typ != N && typ != ND {
				t.Errorf("connection %d: first publish %s, want NBIRTH", c, r.pubs[idx[0]].topic)
			}
		}
	}
	noBirthBeforeOnline := func(t *testing.T, r *tckRun) {
		for i := range r.marks["before-online"] {
			t.Errorf("publish %d (%s) before the host's online STATE", i, r.pubs[i].topic)
		}
		if len(r.of(N)) == 0 {
			t.Error("no NBIRTH after the online STATE")
		}
	}
	rebirth := func(t *testing.T, r *tckRun) {
		k := r.marks["rebirth"]
		if k+3 > len(r.pubs) || r.typ(k) != N || r.typ(k+1) != D || r.typ(k+2) != D {
			t.Fatalf("after the NCMD: %v, want NBIRTH and two DBIRTHs", r.pubs[k:min(k+3, len(r.pubs))])
		}
		first := r.of(N)[0]
		if got, want := tckBdSeq(r.dec[k]), tckBdSeq(r.dec[first]); got != want {
			t.Errorf("the rebirth's bdSeq %d, the session's %d", got, want)
		}
	}
	cleanStop := func(t *testing.T, r *tckRun) {
		n := len(r.pkts)
		if n < 2 || r.pkts[n-1].typ != mqttDISCONNECT || r.pkts[n-2].typ != mqttPUBLISH || !strings.Contains(r.pkts[n-2].topic, "/NDEATH/") {
			t.Fatalf("the last packets of a clean stop are not NDEATH then DISCONNECT")
		}
		last := r.of(N)
		if got, want := tckBdSeq(tahu.Decode(t, r.pkts[n-2].payload)[0]), tckBdSeq(r.dec[last[len(last)-1]]); got != want {
			t.Errorf("the NDEATH of a clean stop has bdSeq %d, the session's NBIRTH %d", got, want)
		}
	}
	ddeath := func(t *testing.T, r *tckRun) {
		k := r.marks["ddeath"]
		if r.typ(k) != DX || r.pubs[k].topic != "spBv1.0/farm/DDEATH/gw1/gas-1" {
			t.Errorf("device offline: publish %s, want its DDEATH", r.pubs[k].topic)
		}
	}
	aliasesUnique := func(t *testing.T, r *tckRun) {
		// Over the NBIRTH and DBIRTHs of one birth sequence.
		seen := map[string]string{}
		for _, i := range r.of(D) {
			dev := r.pubs[i].topic
			for _, m := range r.dec[i].Metrics {
				if m.Alias == nil {
					continue
				}
				if o, ok := seen[*m.Alias]; ok && o != dev+"/"+*m.Name {
					t.Errorf("alias %s is %s and %s/%s", *m.Alias, o, dev, *m.Name)
				}
				seen[*m.Alias] = dev + "/" + *m.Name
			}
		}
	}
	datatypes := map[string]bool{"Int8": true, "Int16": true, "Int32": true, "Int64": true, "UInt8": true, "UInt16": true, "UInt32": true, "UInt64": true,
		"Float": true, "Double": true, "Boolean": true, "String": true, "DateTime": true, "Text": true}

	// qualities checks every Quality property the node sent: Int32, in
	// int_value, one of 0, 192 and 500.
	qualities := func(t *testing.T, r *tckRun) {
		n := 0
		for i := range r.pubs {
			if r.typ(i) == "" || r.typ(i) == ND {
				continue
			}
			for _, m := range tckOurs(t, r.pubs[i].payload).Metrics {
				q, ok := m.Properties.Get("Quality")
				if !ok {
					continue
				}
				n++
				v, isInt := q.Value.IntAs(spb.Int32)
				if q.Type != spb.Int32 || q.Value.Kind != spb.IntValue || !isInt || (v != 0 && v != 192 && v != 500) {
					t.Errorf("publish %d (%s): metric %s alias %d: Quality %+v, want an Int32 0, 192 or 500 in int_value", i, r.pubs[i].topic, m.Name, m.Alias, q)
				}
			}
		}
		if n == 0 {
			t.Error("no Quality property sent: nothing to check")
		}
	}

	checks := []tckCheck{
		{"payloads-propertyset-quality-value-type", qualities},
		{"payloads-propertyset-quality-value-value", qualities},
		// Session establishment.
		{"message-flow-edge-node-birth-publish-connect", birthsThenData},
		{"message-flow-edge-node-birth-publish-will-message", willChecks(func(t *testing.T, c tckPacket) {
			if !c.will {
				t.Errorf("CONNECT %d: no will", c.conn)
			}
		})},
		{"payloads-ndeath-will-message", willChecks(func(t *testing.T, c tckPacket) {
			if !c.will || !strings.Contains(c.willTopic, "/NDEATH/") {
				t.Errorf("CONNECT %d: will %q, want the NDEATH", c.conn, c.willTopic)
			}
		})},
		{"message-flow-edge-node-birth-publish-will-message-topic", willChecks(func(t *testing.T, c tckPacket) {
			if c.willTopic != "spBv1.0/farm/NDEATH/gw1" {
				t.Errorf("CONNECT %d: will topic %q", c.conn, c.willTopic)
			}
		})},
		{"message-flow-edge-node-birth-publish-will-message-payload", willChecks(func(t *testing.T, c tckPacket) {
			if p, err := spb.Unmarshal(c.willPayload); err != nil || len(p.Metrics) != 1 {
				t.Errorf("CONNECT %d: will payload not a Sparkplug payload of the bdSeq: %v", c.conn, err)
			}
		})},
		{"message-flow-edge-node-birth-publish-will-message-qos", willChecks(func(t *testing.T, c tckPacket) {
			if c.willQoS != 1 {
				t.Errorf("CONNECT %d: will QoS %d", c.conn, c.willQoS)
			}
		})},
		{"payloads-ndeath-will-message-qos", willChecks(func(t *testing.T, c tckPacket) {
			if c.willQoS != 1 {
				t.Errorf("CONNECT %d: will QoS %d", c.conn, c.willQoS)
			}
		})},
		{"message-flow-edge-node-birth-publish-will-message-will-retained", willChecks(func(t *testing.T, c tckPacket) {
			if c.willRetain {
				t.Errorf("CONNECT %d: will retained", c.conn)
			}
		})},
		{"payloads-ndeath-will-message-retain", willChecks(func(t *testing.T, c tckPacket) {
			if c.willRetain {
				t.Errorf("CONNECT %d: will retained", c.conn)
			}
		})},
		{"principles-persistence-clean-session-311", willChecks(func(t *testing.T, c tckPacket) {
			if c.level != 4 || !c.clean {
				t.Errorf("CONNECT %d: protocol level %d clean session %v, want MQTT 3.1.1 with a clean session", c.conn, c.level, c.clean)
			}
		})},
		{"payloads-ndeath-bdseq", bdSeqOfBirths},
		{"payloads-nbirth-bdseq-repeat", bdSeqOfBirths},
		{"topics-nbirth-bdseq-matching", bdSeqOfBirths},
		{"payloads-nbirth-bdseq", eachOf([]string{N}, func(t *testing.T, r *tckRun, i int) {
			if tckBdSeq(r.dec[i]) < 0 {
				t.Errorf("NBIRTH %d: no bdSeq", i)
			}
		})},
		{"topics-nbirth-bdseq-included", eachOf([]string{N}, func(t *testing.T, r *tckRun, i int) {
			if tckBdSeq(r.dec[i]) < 0 {
				t.Errorf("NBIRTH %d: no bdSeq", i)
			}
		})},
		{"topics-ndeath-payload", func(t *testing.T, r *tckRun) {
			all := append([][]byte(nil), r.pubs[r.of(ND)[0]].payload)
			for _, c := range r.connects() {
				all = append(all, c.willPayload)
			}
			for i, p := range tahu.Decode(t, all...) {
				if len(p.Metrics) != 1 || p.Metrics[0].Name == nil || *p.Metrics[0].Name != spb.BdSeq {
					t.Errorf("NDEATH %d: metrics %v, want bdSeq alone", i, p.Metrics)
				}
			}
		}},
		{"topics-ndeath-seq", noSeq(ND)},
		{"payloads-ndeath-seq", noSeq(ND)},
		{"message-flow-edge-node-ncmd-subscribe", hasSub("spBv1.0/farm/NCMD/gw1")},
		{"message-flow-device-dcmd-subscribe", hasSub("spBv1.0/farm/DCMD/gw1/+")},
		{"message-flow-edge-node-birth-publish-nbirth-topic", topicForm(N, false)},
		{"topics-nbirth-topic", topicForm(N, false)},
		{"message-flow-edge-node-birth-publish-nbirth-payload", eachOf([]string{N}, func(t *testing.T, r *tckRun, i int) {
			if _, err := spb.Unmarshal(r.pubs[i].payload); err != nil || len(r.dec[i].Metrics) == 0 {
				t.Errorf("NBIRTH %d: %v", i, err)
			}
		})},
		{"message-flow-edge-node-birth-publish-nbirth-payload-seq", hasSeq(N)},
		{"payloads-nbirth-seq", hasSeq(N)},
		{"payloads-sequence-num-req-nbirth", hasSeq(N)},
		{"topics-nbirth-seq-num", seqFollows(N)},
		{"message-flow-edge-node-birth-publish-nbirth-qos", qos0NotRetained(N)},
		{"payloads-nbirth-qos", qos0NotRetained(N)},
		{"topics-nbirth-mqtt", qos0NotRetained(N)},
		{"message-flow-edge-node-birth-publish-nbirth-retained", notRetained(N)},
		{"payloads-nbirth-retain", notRetained(N)},
		{"payloads-nbirth-timestamp", hasTimestamp(N)},
		{"topics-nbirth-timestamp", hasTimestamp(N)},
		{"payloads-nbirth-rebirth-req", rebirthMetric},
		{"topics-nbirth-rebirth-metric", rebirthMetric},
		{"operational-behavior-data-commands-rebirth-name", rebirthMetric},
		{"operational-behavior-data-commands-rebirth-datatype", rebirthMetric},
		{"operational-behavior-data-commands-rebirth-value", rebirthMetric},
		{"operational-behavior-data-commands-rebirth-name-aliases", rebirthMetric},
		{"topics-nbirth-metrics", eachOf([]string{N}, func(t *testing.T, r *tckRun, i int) {
			for _, m := range r.dec[i].Metrics {
				if m.Name == nil || m.Type == "" || m.Value == nil {
					t.Errorf("NBIRTH %d: metric %s without name, datatype or value", i, tckName(m))
				}
			}
		})},
		{"operational-behavior-data-publish-nbirth-values", eachOf([]string{N}, func(t *testing.T, r *tckRun, i int) {
			for _, m := range r.dec[i].Metrics {
				if string(m.Value) == "null" {
					t.Errorf("NBIRTH %d: %s null", i, tckName(m))
				}
			}
		})},
		{"principles-birth-certificates-order", firstPublishIsBirth},
		{"message-flow-device-birth-publish-nbirth-wait", birthsThenData},
		{"message-flow-device-birth-publish-dbirth-topic", topicForm(D, true)},
		{"topics-dbirth-topic", topicForm(D, true)},
		{"message-flow-device-birth-publish-dbirth-match-edge-node-topic", topicForm(D, true)},
		{"message-flow-device-birth-publish-dbirth-payload", eachOf([]string{D}, func(t *testing.T, r *tckRun, i int) {
			if _, err := spb.Unmarshal(r.pubs[i].payload); err != nil || len(r.dec[i].Metrics) == 0 {
				t.Errorf("DBIRTH %d: %v", i, err)
			}
		})},
		{"message-flow-device-birth-publish-dbirth-qos", qos0NotRetained(D)},
		{"payloads-dbirth-qos", qos0NotRetained(D)},
		{"topics-dbirth-mqtt", qos0NotRetained(D)},
		{"message-flow-device-birth-publish-dbirth-retained", notRetained(D)},
		{"payloads-dbirth-retain", notRetained(D)},
		{"payloads-dbirth-seq", hasSeq(D)},
		{"payloads-dbirth-seq-inc", seqFollows(D)},
		{"topics-dbirth-seq", seqFollows(D)},
		{"payloads-dbirth-timestamp", hasTimestamp(D)},
		{"topics-dbirth-timestamp", hasTimestamp(D)},
		{"payloads-dbirth-order", birthsThenData},
		{"payloads-ddata-order", birthsThenData},
		{"topics-dbirth-metrics", eachOf([]string{D}, func(t *testing.T, r *tckRun, i int) {
			for _, m := range r.dec[i].Metrics {
				if m.Name == nil || m.Type == "" {
					t.Errorf("DBIRTH %d: metric %s without name or datatype", i, tckName(m))
				}
			}
		})},
		{"operational-behavior-data-publish-dbirth-values", eachOf([]string{D}, func(t *testing.T, r *tckRun, i int) {
			ours := tckOurs(t, r.pubs[i].payload)
			for _, m := range ours.Metrics {
				if m.Null != (m.Value.Kind == spb.NoValue) {
					t.Errorf("DBIRTH %d: %s is_null %v with value %v", i, m.Name, m.Null, m.Value)
				}
			}
		})},
		{"payloads-alias-birth-requirement", birthMetrics(func(t *testing.T, i int, m sparkplugtest.Metric) {
			if m.Name == nil {
				t.Errorf("birth %d: a metric without a name", i)
			}
			if m.Alias == nil && *m.Name != spb.Rebirth && *m.Name != spb.BdSeq {
				t.Errorf("birth %d: %s without an alias", i, *m.Name)
			}
		})},
		{"payloads-alias-uniqueness", aliasesUnique},
		{"payloads-metric-datatype-req", birthMetrics(func(t *testing.T, i int, m sparkplugtest.Metric) {
			if m.Type == "" {
				t.Errorf("birth %d: %s without a datatype", i, tckName(m))
			}
		})},
		{"payloads-metric-datatype-value", birthMetrics(func(t *testing.T, i int, m sparkplugtest.Metric) {
			if !datatypes[m.Type] {
				t.Errorf("birth %d: %s datatype %q", i, tckName(m), m.Type)
			}
		})},
		{"payloads-metric-datatype-value-type", birthMetrics(func(t *testing.T, i int, m sparkplugtest.Metric) {
			if !datatypes[m.Type] {
				t.Errorf("birth %d: %s datatype %q", i, tckName(m), m.Type)
			}
		})},
		{"payloads-metric-propertyvalue-type-req", birthMetrics(func(t *testing.T, i int, m sparkplugtest.Metric) {
			for k, p := range m.Properties {
				if p.Type == "" {
					t.Errorf("birth %d: %s property %s without a type", i, tckName(m), k)
				}
			}
		})},
		{"payloads-metric-propertyvalue-type-type", birthMetrics(func(t *testing.T, i int, m sparkplugtest.Metric) {
			for k, p := range m.Properties {
				if !datatypes[p.Type] {
					t.Errorf("birth %d: %s property %s type %q", i, tckName(m), k, p.Type)
				}
			}
		})},
		{"payloads-metric-propertyvalue-type-value", birthMetrics(func(t *testing.T, i int, m sparkplugtest.Metric) {
			for k, p := range m.Properties {
				if !datatypes[p.Type] {
					t.Errorf("birth %d: %s property %s type %q", i, tckName(m), k, p.Type)
				}
			}
		})},
		{"payloads-propertyset-keys-array-size", eachOf([]string{D}, func(t *testing.T, r *tckRun, i int) {
			for _, m := range tckOurs(t, r.pubs[i].payload).Metrics {
				if m.Properties != nil && len(m.Properties.Keys) != len(m.Properties.Values) {
					t.Errorf("DBIRTH %d: %s: %d keys, %d values", i, m.Name, len(m.Properties.Keys), len(m.Properties.Values))
				}
			}
		})},
		{"payloads-propertyset-values-array-size", eachOf([]string{D}, func(t *testing.T, r *tckRun, i int) {
			for _, m := range tckOurs(t, r.pubs[i].payload).Metrics {
				if m.Properties != nil && len(m.Properties.Keys) != len(m.Properties.Values) {
					t.Errorf("DBIRTH %d: %s: %d keys, %d values", i, m.Name, len(m.Properties.Keys), len(m.Properties.Values))
				}
			}
		})},
		{"payloads-name-birth-data-requirement", eachOf([]string{N, D, DD}, func(t *testing.T, r *tckRun, i int) {
			for _, m := range r.dec[i].Metrics {
				if m.Timestamp == nil {
					t.Errorf("publish %d (%s): metric %s without a timestamp", i, r.pubs[i].topic, tckName(m))
				}
			}
		})},
		{"case-sensitivity-metric-names", eachOf([]string{D}, func(t *testing.T, r *tckRun, i int) {
			seen := map[string]bool{}
			for _, m := range r.dec[i].Metrics {
				if l := strings.ToLower(*m.Name); seen[l] {
					t.Errorf("DBIRTH %d: two metrics named %q in lower case", i, l)
				} else {
					seen[l] = true
				}
			}
		})},
		// Sending data.
		{"topics-ddata-topic", topicForm(DD, true)},
		{"topics-ddata-mqtt", qos0NotRetained(DD)},
		{"payloads-ddata-qos", qos0NotRetained(DD)},
		{"payloads-ddata-retain", notRetained(DD)},
		{"payloads-ddata-seq", hasSeq(DD)},
		{"topics-ddata-seq-num", seqFollows(DD)},
		{"payloads-ddata-timestamp", hasTimestamp(DD)},
		{"topics-ddata-timestamp", hasTimestamp(DD)},
		{"topics-ddata-payload", dataMetrics(func(t *testing.T, i int, m sparkplugtest.Metric) {
			if m.Alias == nil {
				t.Errorf("DDATA %d: metric %s without an alias", i, tckName(m))
			}
		})},
		{"payloads-alias-data-cmd-requirement", dataMetrics(func(t *testing.T, i int, m sparkplugtest.Metric) {
			if m.Alias == nil || m.Name != nil {
				t.Errorf("DDATA %d: metric %s: name set %v, alias set %v, want the alias alone", i, tckName(m), m.Name != nil, m.Alias != nil)
			}
		})},
		{"payloads-name-requirement", dataMetrics(func(t *testing.T, i int, m sparkplugtest.Metric) {
			if m.Name == nil && m.Alias == nil {
				t.Errorf("DDATA %d: a metric with neither name nor alias", i)
			}
		})},
		{"payloads-sequence-num-always-included", hasSeq(N, D, DD, DX)},
		// Session termination.
		{"operational-behavior-device-ddeath", ddeath},
		{"topics-ddeath-topic", topicForm(DX, true)},
		{"topics-ddeath-mqtt", qos0NotRetained(DX)},
		{"payloads-ddeath-seq", hasSeq(DX)},
		{"payloads-ddeath-seq-number", hasSeq(DX)},
		{"payloads-ddeath-seq-inc", seqFollows(DX)},
		{"topics-ddeath-seq-num", seqFollows(DX)},
		{"payloads-ddeath-timestamp", hasTimestamp(DX)},
		{"topics-ndeath-topic", topicForm(ND, false)},
		{"operational-behavior-edge-node-intentional-disconnect-ndeath", cleanStop},
		{"operational-behavior-edge-node-intentional-disconnect-packet", cleanStop},
		{"payloads-ndeath-will-message-publisher", cleanStop},
		{"payloads-ndeath-will-message-publisher-disconnect-mqtt311", cleanStop},
		// Receiving commands.
		{"operational-behavior-data-commands-rebirth-action-1", rebirth},
		{"operational-behavior-data-commands-rebirth-action-2", rebirth},
		{"operational-behavior-data-commands-rebirth-action-3", rebirth},
		{"dcmd-handed-on", func(t *testing.T, r *tckRun) {
			if len(r.cmds) != 1 || r.cmds[0].Device != "rain-1" || len(r.cmds[0].Metrics) != 1 || r.cmds[0].Metrics[0].Name != "Heater" {
				t.Errorf("DCMDs handed on: %+v, want one for rain-1's Heater", r.cmds)
			}
		}},
		// The primary host.
		{"message-flow-edge-node-birth-publish-phid-wait", noBirthBeforeOnline},
		{"message-flow-edge-node-birth-publish-phid-wait-id", noBirthBeforeOnline},
		{"message-flow-edge-node-birth-publish-phid-wait-online", noBirthBeforeOnline},
		{"message-flow-edge-node-birth-publish-phid-wait-timestamp", noBirthBeforeOnline},
		{"operational-behavior-edge-node-termination-host-offline-timestamp", func(t *testing.T, r *tckRun) {
			// The node was still up after the older offline STATE
			// (checked in the scenario), and its first connection
			// carried every DDATA.
			if len(r.connPub[1]) < 300 {
				t.Errorf("the first connection carried %d publishes", len(r.connPub[1]))
			}
		}},
		{"message-flow-edge-node-birth-publish-phid-offline", func(t *testing.T, r *tckRun) {
			if len(r.connects()) < 2 || len(r.wills) == 0 {
				t.Errorf("%d CONNECTs and %d wills after the offline STATE: want the session ended and a new one", len(r.connects()), len(r.wills))
			}
		}},
		{"operational-behavior-edge-node-termination-host-offline", func(t *testing.T, r *tckRun) {
			if len(r.connects()) < 2 || len(r.wills) == 0 {
				t.Errorf("%d CONNECTs and %d wills after the offline STATE: want the session ended and a new one", len(r.connects()), len(r.wills))
			}
		}},
		{"operational-behavior-edge-node-termination-host-offline-reconnect", func(t *testing.T, r *tckRun) {
			idx := r.connPub[2]
			if len(idx) < 3 || r.typ(idx[0]) != N {
				t.Errorf("the second connection: %d publishes, want the births first", len(idx))
			}
		}},
		{"will-bdseq-of-the-broken-session", func(t *testing.T, r *tckRun) {
			if len(r.wills) == 0 {
				t.Fatal("no will")
			}
			if got, want := tckBdSeq(tahu.Decode(t, r.wills[0].payload)[0]), tckBdSeq(r.dec[r.of(N)[0]]); got != want {
				t.Errorf("the will's bdSeq %d, the broken session's NBIRTH %d", got, want)
			}
		}},
	}
	for _, c := range checks {
		t.Run(c.id, func(t *testing.T) { c.check(t, r) })
	}
}

// tckName is a decoded metric's name, or its alias.
func tckName(m sparkplugtest.Metric) string {
	switch {
	case m.Name != nil:
		return *m.Name
	case m.Alias != nil:
		return "alias " + *m.Alias
	}
	return "(no name, no alias)"
}

// tckOurs decodes a payload with the gateway's own decoder, for what
// Tahu's decoding leaves out (a property set's arrays, is_null with a
// value).
func tckOurs(t *testing.T, b []byte) spb.Payload {
	t.Helper()
	p, err := spb.Unmarshal(b)
	if err != nil {
		t.Fatal(err)
	}
	return *p
}
