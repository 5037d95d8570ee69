package agent

import (
	"fmt"
	"strings"
	"sync"
	"testing"
	"time"

	"fieldlink/downlink"
	"fieldlink/internal/testtool"
	"fieldlink/internal/testtool/emutest"
	"fieldlink/sensors/emulator"
	"fieldlink/sparkplug"
	"fieldlink/sparkplug/sparkplugtest"
	uplinksparkplug "fieldlink/uplink/sparkplug"
)

// platformSubscribe subscribes the platform to topic at QoS 1 and hands
// each message's topic and a copy of its payload to f.
func platformSubscribe(t *testing.T, host *platform, topic string, f func(topic string, payload []byte)) {
	t.Helper()
	host.c.Subscribe(t, topic, func(topic string, payload []byte) {
		f(topic, append([]byte(nil), payload...))
	})
}

// TestSparkplugDCMD runs a gateway whose upstream is a Sparkplug B node on
// a real mosquitto, with an emulated valve: Tahu decodes its DBIRTH, and
// DCMDs encoded by Tahu, by name and by alias, go through the downlink's
// rules: a write within the limits reaches the device once, even when the
// same DCMD arrives twice; one above the limit never does.
func TestSparkplugDCMD(t *testing.T) {
	tahu := sparkplugtest.NewTahu(t)
	b := testtool.NewMosquitto(t, testtool.FindMosquitto(t))
	frames := &frameLog{frames: map[byte][]string{}}
	_, addr := emutest.ServeDevices(t, false, emutest.Devices(t, "generic-irrigation-valve"), emulator.Options{Seed: 1, OnRequest: frames.on})

	var mu sync.Mutex
	births := map[string][]byte{}
	host := newPlatform(t, b.Addr())
	platformSubscribe(t, host, "spBv1.0/farm/DBIRTH/#", func(topic string, payload []byte) {
		mu.Lock()
		births[topic] = payload
		mu.Unlock()
	})

	startSparkplugGateway(t, "gw-dl", addr, true, "group_id: farm", b.URL())

	const birthTopic = "spBv1.0/farm/DBIRTH/gw-dl/valve-1"
	var birth []byte
	testtool.WaitFor(t, 15*time.Second, "the DBIRTH of valve-1", func() bool {
		mu.Lock()
		defer mu.Unlock()
		birth = births[birthTopic]
		return birth != nil
	})
	aliases := map[string]string{}
	for _, m := range tahu.Decode(t, birth)[0].Metrics {
		if m.Name == nil || m.Alias == nil {
			t.Fatalf("DBIRTH metric without a name or alias: %+v", m)
		}
		aliases[*m.Name] = *m.Alias
		want := map[string]string{"ValveOpen": "Boolean", "Setpoint": "Double", "FlowTotal": "Int32", "PressureLimit": "Float", "ValvePosition": "UInt16"}[*m.Name]
		if want != "" && m.Type != want {
			t.Errorf("DBIRTH: %s is %s, want %s", *m.Name, m.Type, want)
		}
		if *m.Name == "Setpoint" && (m.Properties["engUnit"].Type != "String" || string(m.Properties["engUnit"].Value) != `"L/min"`) {
			t.Errorf("DBIRTH: Setpoint's engUnit %+v", m.Properties)
		}
	}
	if aliases["ValveOpen"] == "" || aliases["Setpoint"] == "" {
		t.Fatalf("DBIRTH aliases %v", aliases)
	}

	now := time.Now().UnixMilli()
	var alias uint64
	fmt.Sscan(aliases["Setpoint"], &alias)
	dcmds := tahu.Encode(t,
		map[string]any{"timestamp": now, "seq": 0, "metrics": []map[string]any{{"name": "ValveOpen", "type": "Boolean", "value": true}}},
		map[string]any{"timestamp": now + 1, "seq": 1, "metrics": []map[string]any{{"alias": alias, "type": "Double", "value": 51}}},
	)
	publish := func(p []byte) {
		t.Helper()
		host.c.Publish(t, "spBv1.0/farm/DCMD/gw-dl/valve-1", p, false)
	}
	open, err := sparkplugCommand(uplinksparkplug.Command{Device: "valve-1", At: uint64(now), Payload: dcmds[0]}, 0,
		sparkplug.Metric{Name: "ValveOpen", Type: sparkplug.Boolean, Value: sparkplug.BoolOf(true)})
	if err != nil {
		t.Fatal(err)
	}
	publish(dcmds[0])
	if res := host.result(t, open.ID); res.Status != downlink.StatusDone || res.Readback.String() != "true" {
		t.Fatalf("DCMD ValveOpen: %+v", res)
	}
	if got := frames.of(1); len(got) != 1 || got[0] != "050000ff00" {
		t.Fatalf("the valve received %v, want one write of coil 0 on", got)
	}
	// The same DCMD again (a redelivery): answered from the ledger, no frame.
	publish(dcmds[0])
	testtool.WaitFor(t, 15*time.Second, "the repeated DCMD answered", func() bool { n, _ := host.count(open.ID); return n >= 2 })
	// Above the point's max, by alias: refused, no frame.
	publish(dcmds[1])
	over, _ := sparkplugCommand(uplinksparkplug.Command{Device: "valve-1", At: uint64(now + 1), Payload: dcmds[1]}, 0,
		sparkplug.Metric{Name: "Setpoint", Type: sparkplug.Double, Value: sparkplug.DoubleOf(51)})
	if res := host.result(t, over.ID); res.Status != downlink.StatusRejected {
		t.Errorf("DCMD Setpoint 51: %+v", res)
	}
	if got := frames.of(1); len(got) != 1 {
		t.Errorf("the valve received %v, want only the first write", got)
	}
}

func TestSparkplugCommandIDs(t *testing.T) {
	m := sparkplug.Metric{Name: "ValveOpen", Value: sparkplug.BoolOf(true)}
	cmd := uplinksparkplug.Command{Device: "v", At: 1700000000000, Payload: []byte{1, 2, 3}}
	a, err := sparkplugCommand(cmd, 0, m)
	if err != nil {
		t.Fatal(err)
	}
	b, _ := sparkplugCommand(cmd, 0, m)
	if a.ID != b.ID || a.IssuedAt.Time().UnixMilli() != 1700000000000 {
		t.Errorf("same DCMD, ids %s and %s, issued %s", a.ID, b.ID, a.IssuedAt)
	}
	for name, other := range map[string]func() (downlink.Command, error){
		"payload": func() (downlink.Command, error) {
			c := cmd
			c.Payload = []byte{1, 2, 4}
			return sparkplugCommand(c, 0, m)
		},
		"device": func() (downlink.Command, error) { c := cmd; c.Device = "w"; return sparkplugCommand(c, 0, m) },
		"metric": func() (downlink.Command, error) { return sparkplugCommand(cmd, 1, m) },
	} {
		if o, _ := other(); o.ID == a.ID {
			t.Errorf("another %s, the same id %s", name, a.ID)
		}
	}
	if _, err := sparkplugCommand(uplinksparkplug.Command{Device: "v", Payload: []byte{1}}, 0, m); err == nil {
		t.Error("a DCMD without a timestamp was accepted")
	}
	if _, err := sparkplugCommand(cmd, 0, sparkplug.Metric{Alias: 9, HasAlias: true, Value: sparkplug.BoolOf(true)}); err == nil {
		t.Error("an unknown alias was accepted")
	}
	if _, err := sparkplugCommand(cmd, 0, sparkplug.Metric{Name: "x", Value: sparkplug.StringOf("on")}); err == nil {
		t.Error("a string value was accepted")
	}
}

// TestSparkplugPrimaryHostKeepsPackets runs a gateway whose Sparkplug
// node has a primary host that is offline at first: the packets wait in
// the buffer, no birth goes out; once the host's STATE says online, the
// node births, then sends what it kept, oldest first, with is_historical,
// and live readings after them without. Tahu decodes every DDATA.
func TestSparkplugPrimaryHostKeepsPackets(t *testing.T) {
	tahu := sparkplugtest.NewTahu(t)
	b := testtool.NewMosquitto(t, testtool.FindMosquitto(t))
	_, addr := emutest.ServeDevices(t, false, emutest.Devices(t, "generic-irrigation-valve"), emulator.Options{Seed: 1})
	host := newPlatform(t, b.Addr())
	state := func(online bool) {
		t.Helper()
		p := fmt.Sprintf(`{"online":%v,"timestamp":%d}`, online, time.Now().UnixMilli())
		host.c.Publish(t, "spBv1.0/STATE/scada", []byte(p), true)
	}
	state(false)
	type msg struct {
		topic   string
		payload []byte
	}
	var mu sync.Mutex
	var msgs []msg
	platformSubscribe(t, host, "spBv1.0/farm/+/gw-sp/#", func(topic string, payload []byte) {
		mu.Lock()
		msgs = append(msgs, msg{topic, payload})
		mu.Unlock()
	})

	_, g, _ := startSparkplugGateway(t, "gw-sp", addr, false, "group_id: farm, primary_host: scada", b.URL())
	testtool.WaitFor(t, 15*time.Second, "five packets kept in the buffer", func() bool { return g.q.Len() >= 5 })
	mu.Lock()
	before := len(msgs)
	mu.Unlock()
	if before != 0 {
		t.Fatalf("%d messages before the primary host is online", before)
	}
	kept := g.q.Len()
	state(true)
	testtool.WaitFor(t, 15*time.Second, "the kept packets and two live ones", func() bool {
		mu.Lock()
		defer mu.Unlock()
		live := 0
		for _, m := range msgs {
			if strings.Contains(m.topic, "/DDATA/") {
				p, err := sparkplug.Unmarshal(m.payload)
				if err == nil && len(p.Metrics) > 0 && !p.Metrics[0].Historical {
					live++
				}
			}
		}
		return live >= 2
	})
	mu.Lock()
	got := append([]msg(nil), msgs...)
	mu.Unlock()
	if !strings.HasSuffix(got[0].topic, "/NBIRTH/gw-sp") || !strings.HasSuffix(got[1].topic, "/DBIRTH/gw-sp/valve-1") {
		t.Fatalf("first messages %s, %s: want NBIRTH then DBIRTH", got[0].topic, got[1].topic)
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
		var seq, at string
		h := false
		for _, m := range p.Metrics {
			if m.Alias != nil && *m.Alias == aliases[uplinksparkplug.PacketSeq] {
				seq = strings.Trim(string(m.Value), `"`)
				h = m.IsHistorical != nil && *m.IsHistorical
			}
			if m.Timestamp != nil {
				at = *m.Timestamp
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
			t.Errorf("DDATA %d (Seq %s, at %s): historical after a live one", i, seq, at)
		case h:
			hist++
		default:
			live++
		}
	}
	if hist < kept {
		t.Errorf("%d historical DDATA, want at least the %d packets kept", hist, kept)
	}
}
