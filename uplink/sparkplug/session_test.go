package sparkplug

import (
	"context"
	"errors"
	"fieldlink/uplink"
	"fieldlink/uplink/mqtt/mqtttest"
	"fmt"
	"log/slog"
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

// spMessage is one message a test subscriber received.
type spMessage struct {
	topic   string
	payload []byte
}

// spWant is what a message must be: its topic and its payload.
type spWant struct {
	topic string
	p     spb.Payload
}

// spCompare checks the messages got, which Tahu decodes, against wants, in
// order.
func spCompare(t *testing.T, tahu *sparkplugtest.Tahu, got []spMessage, wants []spWant) {
	t.Helper()
	payloads := make([][]byte, len(got))
	for i := range got {
		payloads[i] = got[i].payload
	}
	decoded := tahu.Decode(t, payloads...)
	if len(got) != len(wants) {
		t.Errorf("%d messages, want %d", len(got), len(wants))
	}
	for i := range min(len(got), len(wants)) {
		if got[i].topic != wants[i].topic {
			t.Errorf("message %d: topic %s, want %s", i, got[i].topic, wants[i].topic)
			continue
		}
		for _, d := range sparkplugtest.Diff(decoded[i], &wants[i].p) {
			t.Errorf("message %d (%s): %s", i, got[i].topic, d)
		}
	}
}

// spRecorder keeps, in order, the node's messages that a subscriber to
// spBv1.0/# receives.
type spRecorder struct {
	mu   sync.Mutex
	msgs []spMessage
}

func spRecord(t *testing.T, addr string) *spRecorder {
	t.Helper()
	r := &spRecorder{}
	c := mqtttest.Client(t, addr, fmt.Sprintf("test-sp-%d", time.Now().UnixNano()))
	tok := c.Subscribe("spBv1.0/#", 1, func(_ paho.Client, m paho.Message) {
		if _, typ, _, _, err := spb.ParseTopic(m.Topic()); err != nil || typ == spb.NCMD || typ == spb.DCMD {
			return // the host's, not the node's
		}
		r.mu.Lock()
		r.msgs = append(r.msgs, spMessage{m.Topic(), append([]byte(nil), m.Payload()...)})
		r.mu.Unlock()
	})
	if !tok.WaitTimeout(10*time.Second) || tok.Error() != nil {
		t.Fatalf("subscribe: %v", tok.Error())
	}
	return r
}

func (r *spRecorder) wait(t *testing.T, n int, what string) []spMessage {
	t.Helper()
	testtool.WaitFor(t, 10*time.Second, what, func() bool {
		r.mu.Lock()
		defer r.mu.Unlock()
		return len(r.msgs) >= n
	})
	r.mu.Lock()
	defer r.mu.Unlock()
	return append([]spMessage(nil), r.msgs...)
}

var spTestDevices = []Device{
	{Name: "rain-1", Metrics: []Metric{
		{Name: "Level", Type: spb.Double, Unit: "mm"},
		{Name: "Count", Type: spb.UInt16},
		{Name: "Heater", Type: spb.Boolean},
	}},
	{Name: "gas-1", Metrics: []Metric{
		{Name: "CH4", Type: spb.Float, Unit: "%LEL"},
		{Name: "Offset", Type: spb.Int32},
	}},
}

// spRun makes a Sparkplug upstream on the broker and runs it until the
// test ends; stop ends Run and waits for it.
func spRun(t *testing.T, url string, cfg Config) (*uplink.Conn, *node, func()) {
	t.Helper()
	log, _ := mqtttest.Logger(t)
	c, sp := spOpen(t, log, url, cfg, 4)
	return c, sp, mqtttest.Start(t, c.Run)
}

// spOpen opens the node of cfg on url, the node's first server, as a pool
// of window would, and returns its Conn and its sender.
func spOpen(t *testing.T, log *slog.Logger, url string, cfg Config, window int) (*uplink.Conn, *node) {
	t.Helper()
	c, err := Kind{}.Open(uplink.UpstreamConfig{URL: url, Encoding: uplink.EncodingSparkplugB, Options: &cfg},
		uplink.PoolConfig{Logger: log, Window: window, Vars: map[string]string{"site": "s1", "gateway": "gw1"}})
	if err != nil {
		t.Fatal(err)
	}
	return c, c.Sender.(*node)
}

// cut drops the connection the node subscribed on last.
func (sp *node) cut(err error) {
	sp.s.mu.Lock()
	l := sp.s.conn
	sp.s.mu.Unlock()
	l.Drop(err)
}

func spRecordOf(t *testing.T, p *packet.Packet) buffer.Record {
	t.Helper()
	return buffer.Record{Seq: p.Seq, Data: p.AppendJSON(nil, packet.Strings)}
}

// TestSparkplugSession runs the node against a real mosquitto: births,
// data by alias, a device's death and return, a rebirth asked by a
// Tahu-encoded NCMD, the will on a broken connection and the NDEATH of a
// clean stop. Eclipse Tahu's JavaScript library decodes every message the
// broker delivered, and each is compared with what the readings and the
// profile say, seq and bdSeq included.
func TestSparkplugSession(t *testing.T) {
	tahu := sparkplugtest.NewTahu(t)
	b := mqtttest.Broker(t, mqtttest.BrokerOptions{})
	rec := spRecord(t, b.Addr())
	clock := time.Date(2026, 3, 1, 12, 0, 0, 0, time.UTC)
	now := uint64(clock.UnixMilli())
	m, sp, stop := spRun(t, b.URL(), Config{GroupID: "farm", EdgeNode: "gw1", Devices: spTestDevices,
		Now: func() time.Time { return clock }})

	// What each message must be, in order, as the steps below make them.
	var wants []spWant
	seq := uint64(0)
	next := func() uint64 { s := seq; seq = (seq + 1) % 256; return s }
	nbirth := func(bd int64) {
		seq = 0
		wants = append(wants, spWant{"spBv1.0/farm/NBIRTH/gw1", spb.Payload{Timestamp: now, HasSeq: true, Seq: next(), Metrics: []spb.Metric{
			{Name: "bdSeq", Type: spb.Int64, Timestamp: now, Value: spb.Int(spb.Int64, bd)},
			{Name: "Node Control/Rebirth", Type: spb.Boolean, Timestamp: now, Value: spb.BoolOf(false)},
		}}})
	}
	ndeath := func(bd int64) {
		wants = append(wants, spWant{"spBv1.0/farm/NDEATH/gw1", spb.Payload{Timestamp: now, Metrics: []spb.Metric{
			{Name: "bdSeq", Type: spb.Int64, Value: spb.Int(spb.Int64, bd)},
		}}})
	}
	// last values, by device and metric, as a DBIRTH must carry them
	last := map[string][]spb.Value{"rain-1": make([]spb.Value, 3), "gas-1": make([]spb.Value, 2)}
	lastAt := map[string][]uint64{"rain-1": make([]uint64, 3), "gas-1": make([]uint64, 2)}
	dbirth := func(dev string) {
		p := spb.Payload{Timestamp: now, HasSeq: true, Seq: next()}
		alias := uint64(1)
		for _, d := range spTestDevices {
			for i, mt := range d.Metrics {
				if d.Name == dev {
					sm := spb.Metric{Name: mt.Name, Alias: alias, HasAlias: true, Type: mt.Type, Timestamp: lastAt[dev][i], Value: last[dev][i]}
					if sm.Timestamp == 0 {
						sm.Timestamp = now
					}
					sm.Null = sm.Value.Kind == spb.NoValue
					if mt.Unit != "" {
						sm.Properties = &spb.PropertySet{}
						sm.Properties.Add("engUnit", spb.PropertyValue{Type: spb.String, Value: spb.StringOf(mt.Unit)})
					}
					p.Metrics = append(p.Metrics, sm)
				}
				alias++
			}
		}
		// The packet's dedupe key, after every profile metric.
		pa := map[string]uint64{"rain-1": 6, "gas-1": 8}[dev]
		p.Metrics = append(p.Metrics,
			spb.Metric{Name: PacketSeq, Alias: pa, HasAlias: true, Type: spb.UInt64, Timestamp: now, Null: true},
			spb.Metric{Name: packetEpoch, Alias: pa + 1, HasAlias: true, Type: spb.String, Timestamp: now, Null: true})
		wants = append(wants, spWant{"spBv1.0/farm/DBIRTH/gw1/" + dev, p})
	}

	nbirth(0)
	dbirth("rain-1")
	dbirth("gas-1")
	rec.wait(t, len(wants), "NBIRTH and two DBIRTHs")
	mqtttest.WaitConnected(t, m.Connected, true)

	// Data: every field by alias; a field the reading lacks is null.
	at := time.Date(2026, 3, 1, 11, 59, 30, 0, time.UTC)
	atMs := uint64(at.UnixMilli())
	ctx := context.Background()
	readings := []struct {
		p       packet.Packet
		metrics []spb.Metric
	}{
		{packet.Packet{At: at, DeviceID: "rain-1", DataType: "Rain", Seq: 1, Epoch: "e-7f3a", Fields: []packet.Field{
			{Name: "Level", Value: packet.Float(12.5, 2)}, {Name: "Count", Value: packet.Uint(7)}, {Name: "Heater", Value: packet.Bool(true)}}},
			[]spb.Metric{
				{Alias: 1, HasAlias: true, Timestamp: atMs, Type: spb.Double, Value: spb.DoubleOf(12.5)},
				{Alias: 2, HasAlias: true, Timestamp: atMs, Type: spb.UInt16, Value: spb.Int(spb.UInt16, 7)},
				{Alias: 3, HasAlias: true, Timestamp: atMs, Type: spb.Boolean, Value: spb.BoolOf(true)},
				{Alias: 6, HasAlias: true, Timestamp: atMs, Type: spb.UInt64, Value: spb.Int(spb.UInt64, 1)},
				{Alias: 7, HasAlias: true, Timestamp: atMs, Type: spb.String, Value: spb.StringOf("e-7f3a")},
			}},
		{packet.Packet{At: at, DeviceID: "gas-1", DataType: "Gas", Seq: 2, Fields: []packet.Field{
			{Name: "Offset", Value: packet.Int(-3)}, {Name: "Unknown", Value: packet.Int(1)}}},
			[]spb.Metric{
				{Alias: 5, HasAlias: true, Timestamp: atMs, Type: spb.Int32, Value: spb.Int(spb.Int32, -3)},
				{Alias: 4, HasAlias: true, Timestamp: atMs, Type: spb.Float, Null: true},
				{Alias: 8, HasAlias: true, Timestamp: atMs, Type: spb.UInt64, Value: spb.Int(spb.UInt64, 2)},
				{Alias: 9, HasAlias: true, Timestamp: atMs, Type: spb.String, Null: true},
			}},
	}
	for _, r := range readings {
		if err := sp.Send(ctx, []buffer.Record{spRecordOf(t, &r.p)}); err != nil {
			t.Fatalf("Send: %v", err)
		}
		wants = append(wants, spWant{"spBv1.0/farm/DDATA/gw1/" + r.p.DeviceID, spb.Payload{Timestamp: now, HasSeq: true, Seq: next(), Metrics: r.metrics}})
	}
	last["rain-1"] = []spb.Value{spb.DoubleOf(12.5), spb.Int(spb.UInt16, 7), spb.BoolOf(true)}
	lastAt["rain-1"] = []uint64{atMs, atMs, atMs}
	rec.wait(t, len(wants), "two DDATA")

	// gas-1 goes offline and comes back: DDEATH, then a DBIRTH whose
	// values are null (the old ones are stale). A packet of the dead
	// device, read before it died, goes out as historical.
	if err := sp.SetOnline(ctx, "gas-1", false); err != nil {
		t.Fatal(err)
	}
	wants = append(wants, spWant{"spBv1.0/farm/DDEATH/gw1/gas-1", spb.Payload{Timestamp: now, HasSeq: true, Seq: next()}})
	if err := sp.Send(ctx, []buffer.Record{spRecordOf(t, &readings[1].p)}); err != nil {
		t.Fatal(err)
	}
	hist := spb.Payload{Timestamp: now, HasSeq: true, Seq: next()}
	for _, m := range readings[1].metrics {
		m.Historical = true
		hist.Metrics = append(hist.Metrics, m)
	}
	wants = append(wants, spWant{"spBv1.0/farm/DDATA/gw1/gas-1", hist})
	if err := sp.SetOnline(ctx, "gas-1", true); err != nil {
		t.Fatal(err)
	}
	dbirth("gas-1")
	rec.wait(t, len(wants), "DDEATH, historical DDATA and DBIRTH")

	// A rebirth asked by the host, encoded by Tahu.
	ncmd := tahu.Encode(t, map[string]any{"timestamp": now, "metrics": []map[string]any{
		{"name": "Node Control/Rebirth", "type": "Boolean", "value": true}}})[0]
	host := mqtttest.Client(t, b.Addr(), "host")
	if tok := host.Publish("spBv1.0/farm/NCMD/gw1", 1, false, ncmd); !tok.WaitTimeout(5*time.Second) || tok.Error() != nil {
		t.Fatal(tok.Error())
	}
	nbirth(0)
	dbirth("rain-1")
	dbirth("gas-1")
	rec.wait(t, len(wants), "the births after NCMD rebirth")

	// The connection breaks: the broker publishes the will, the NDEATH
	// with the NBIRTH's bdSeq; the new connection births with the next.
	sp.cut(errors.New("test: connection cut"))
	ndeath(0)
	nbirth(1)
	dbirth("rain-1")
	dbirth("gas-1")
	rec.wait(t, len(wants), "the will and the births of the new connection")
	mqtttest.WaitConnected(t, m.Connected, true)

	// A clean stop publishes the NDEATH itself.
	stop()
	ndeath(1)
	got := rec.wait(t, len(wants), "the NDEATH of a clean stop")

	spCompare(t, tahu, got, wants)
}

// TestSparkplugPrimaryHost: with a primary host, the node births only
// once the host's STATE says online; until then packets are refused (they
// stay in the buffer) and the sender is not up. What was kept goes out
// with is_historical, a fresh reading without; an offline STATE ends the
// connection (the will is the NDEATH) and the node waits for the host
// again; a STATE older than the latest is ignored. Tahu decodes every
// message.
func TestSparkplugPrimaryHost(t *testing.T) {
	tahu := sparkplugtest.NewTahu(t)
	b := mqtttest.Broker(t, mqtttest.BrokerOptions{})
	rec := spRecord(t, b.Addr())
	host := mqtttest.Client(t, b.Addr(), "scada")
	state := func(online bool, ts int64) {
		t.Helper()
		p := fmt.Sprintf(`{"online":%v,"timestamp":%d}`, online, ts)
		if tok := host.Publish("spBv1.0/STATE/scada", 1, true, p); !tok.WaitTimeout(5*time.Second) || tok.Error() != nil {
			t.Fatal(tok.Error())
		}
	}
	state(false, 100)
	clock := time.Date(2026, 3, 1, 12, 0, 0, 0, time.UTC)
	now := uint64(clock.UnixMilli())
	m, sp, _ := spRun(t, b.URL(), Config{GroupID: "farm", EdgeNode: "gw1", PrimaryHost: "scada",
		Devices: spTestDevices[1:], Now: func() time.Time { return clock }})
	mqtttest.WaitConnected(t, m.Connected, true)
	ctx := context.Background()

	kept := packet.Packet{At: time.Now().Add(-time.Minute).Truncate(time.Second), DeviceID: "gas-1", Seq: 1, Fields: []packet.Field{
		{Name: "CH4", Value: packet.Float(1.5, 1)}, {Name: "Offset", Value: packet.Int(2)}}}
	if sp.Up() {
		t.Error("up before the primary host is online")
	}
	if err := sp.Send(ctx, []buffer.Record{spRecordOf(t, &kept)}); err == nil {
		t.Error("a packet was sent before the primary host is online")
	}

	state(true, 200)
	testtool.WaitFor(t, 10*time.Second, "the sender up", sp.Up)
	if err := sp.Send(ctx, []buffer.Record{spRecordOf(t, &kept)}); err != nil {
		t.Fatal(err)
	}
	fresh := kept
	fresh.At, fresh.Seq = time.Now().Add(time.Minute).Truncate(time.Second), 2 // packets carry seconds
	if err := sp.Send(ctx, []buffer.Record{spRecordOf(t, &fresh)}); err != nil {
		t.Fatal(err)
	}
	keptMs, freshMs := uint64(kept.At.UnixMilli()), uint64(fresh.At.UnixMilli())
	ddata := func(seq uint64, at uint64, hist bool, pseq int64) spb.Payload {
		return spb.Payload{Timestamp: now, HasSeq: true, Seq: seq, Metrics: []spb.Metric{
			{Alias: 1, HasAlias: true, Timestamp: at, Type: spb.Float, Value: spb.FloatOf(1.5), Historical: hist},
			{Alias: 2, HasAlias: true, Timestamp: at, Type: spb.Int32, Value: spb.Int(spb.Int32, 2), Historical: hist},
			{Alias: 3, HasAlias: true, Timestamp: at, Type: spb.UInt64, Value: spb.Int(spb.UInt64, pseq), Historical: hist},
			{Alias: 4, HasAlias: true, Timestamp: at, Type: spb.String, Null: true, Historical: hist},
		}}
	}
	// A stale offline STATE is ignored: the node stays on this connection.
	state(false, 150)
	if err := sp.Send(ctx, []buffer.Record{spRecordOf(t, &fresh)}); err != nil {
		t.Fatal(err)
	}
	rec.wait(t, 5, "NBIRTH, DBIRTH and three DDATA")

	// The host goes offline: the node disconnects, the broker publishes
	// the will; on the new connection it waits for the host.
	state(false, 300)
	rec.wait(t, 6, "the NDEATH will")
	testtool.WaitFor(t, 10*time.Second, "a new connection", func() bool { return m.Connected() })
	if sp.Up() {
		t.Error("up while the primary host is offline")
	}
	state(true, 400)
	got := rec.wait(t, 8, "the births once the host is back")

	nbirth := func(bd int64) spb.Payload {
		return spb.Payload{Timestamp: now, HasSeq: true, Seq: 0, Metrics: []spb.Metric{
			{Name: "bdSeq", Type: spb.Int64, Timestamp: now, Value: spb.Int(spb.Int64, bd)},
			{Name: "Node Control/Rebirth", Type: spb.Boolean, Timestamp: now, Value: spb.BoolOf(false)},
		}}
	}
	dbirth := spb.Payload{Timestamp: now, HasSeq: true, Seq: 1}
	for i, mt := range spTestDevices[1].Metrics {
		m := spb.Metric{Name: mt.Name, Alias: uint64(i + 1), HasAlias: true, Type: mt.Type, Timestamp: now, Null: true}
		if mt.Unit != "" {
			m.Properties = &spb.PropertySet{}
			m.Properties.Add("engUnit", spb.PropertyValue{Type: spb.String, Value: spb.StringOf(mt.Unit)})
		}
		dbirth.Metrics = append(dbirth.Metrics, m)
	}
	dbirth.Metrics = append(dbirth.Metrics,
		spb.Metric{Name: PacketSeq, Alias: 3, HasAlias: true, Type: spb.UInt64, Timestamp: now, Null: true},
		spb.Metric{Name: packetEpoch, Alias: 4, HasAlias: true, Type: spb.String, Timestamp: now, Null: true})
	wants := []spWant{
		{"spBv1.0/farm/NBIRTH/gw1", nbirth(0)},
		{"spBv1.0/farm/DBIRTH/gw1/gas-1", dbirth},
		{"spBv1.0/farm/DDATA/gw1/gas-1", ddata(2, keptMs, true, 1)},
		{"spBv1.0/farm/DDATA/gw1/gas-1", ddata(3, freshMs, false, 2)},
		{"spBv1.0/farm/DDATA/gw1/gas-1", ddata(4, freshMs, false, 2)},
		{"spBv1.0/farm/NDEATH/gw1", spb.Payload{Timestamp: now, Metrics: []spb.Metric{{Name: "bdSeq", Type: spb.Int64, Value: spb.Int(spb.Int64, 0)}}}},
		{"spBv1.0/farm/NBIRTH/gw1", nbirth(1)},
	}
	// The second DBIRTH carries the fresh values, the kept ones being
	// historical.
	db2 := dbirth
	db2.Metrics = append([]spb.Metric(nil), dbirth.Metrics...)
	db2.Metrics[0].Null, db2.Metrics[0].Value, db2.Metrics[0].Timestamp = false, spb.FloatOf(1.5), freshMs
	db2.Metrics[1].Null, db2.Metrics[1].Value, db2.Metrics[1].Timestamp = false, spb.Int(spb.Int32, 2), freshMs
	wants = append(wants, spWant{"spBv1.0/farm/DBIRTH/gw1/gas-1", db2})

	spCompare(t, tahu, got, wants)
}

// TestSparkplugDeviceHealth: the node follows Online, publishing a DDEATH
// when a device goes offline and a DBIRTH when it is back.
func TestSparkplugDeviceHealth(t *testing.T) {
	tahu := sparkplugtest.NewTahu(t)
	b := mqtttest.Broker(t, mqtttest.BrokerOptions{})
	rec := spRecord(t, b.Addr())
	var mu sync.Mutex
	online := map[string]bool{"rain-1": true, "gas-1": true}
	set := func(dev string, on bool) {
		mu.Lock()
		online[dev] = on
		mu.Unlock()
	}
	spRun(t, b.URL(), Config{GroupID: "farm", EdgeNode: "gw1", Devices: spTestDevices, OnlineEvery: 5 * time.Millisecond,
		Online: func() map[string]bool {
			mu.Lock()
			defer mu.Unlock()
			return map[string]bool{"rain-1": online["rain-1"], "gas-1": online["gas-1"]}
		}})
	rec.wait(t, 3, "the births")
	set("gas-1", false)
	rec.wait(t, 4, "the DDEATH")
	set("gas-1", true)
	got := rec.wait(t, 5, "the DBIRTH")
	want := []string{"NBIRTH/gw1", "DBIRTH/gw1/rain-1", "DBIRTH/gw1/gas-1", "DDEATH/gw1/gas-1", "DBIRTH/gw1/gas-1"}
	payloads := make([][]byte, len(got))
	for i := range got {
		payloads[i] = got[i].payload
	}
	for i, p := range tahu.Decode(t, payloads...) {
		if i >= len(want) {
			t.Errorf("message %d: %s, want none", i, got[i].topic)
			continue
		}
		if got[i].topic != "spBv1.0/farm/"+want[i] || p.Seq == nil || *p.Seq != fmt.Sprint(i) {
			t.Errorf("message %d: %s seq %v, want spBv1.0/farm/%s seq %d", i, got[i].topic, p.Seq, want[i], i)
		}
	}
}
