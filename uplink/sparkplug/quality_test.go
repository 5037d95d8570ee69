package sparkplug

import (
	"context"
	"fieldlink/uplink/mqtt/mqtttest"
	"fmt"
	"strings"
	"testing"
	"time"

	"fieldlink/buffer"
	"fieldlink/packet"
	spb "fieldlink/sparkplug"
	"fieldlink/sparkplug/sparkplugtest"
)

// TestSparkplugQuality: an alarm reading and a reading of a clock not in
// step reach the host as Sparkplug hosts read them. A point with alarm
// limits has a Boolean "<point>/Alarm" metric, true in the DDATA of a
// packet that names it among its AlarmFields; a ClockUnsynced reading's
// metrics carry the Quality property 500 (stale), a failed read is
// is_null with Quality 0 (bad), and a good value after another quality
// says 192. Tahu decodes every message.
func TestSparkplugQuality(t *testing.T) {
	tahu := sparkplugtest.NewTahu(t)
	b := mqtttest.Broker(t, mqtttest.BrokerOptions{})
	rec := spRecord(t, b.Addr())
	devs := []Device{{Name: "gas-1", Metrics: []Metric{
		{Name: "CH4", Type: spb.Float, Unit: "%LEL", Alarm: true},
		{Name: "Offset", Type: spb.Int32},
	}}}
	_, sp, _ := spRun(t, b.URL(), Config{GroupID: "farm", EdgeNode: "gw1", Devices: devs})
	rec.wait(t, 2, "the births")
	ctx := context.Background()
	at := time.Now().Truncate(time.Second)
	send := func(seq uint64, unsynced bool, alarm []string, fields ...packet.Field) {
		t.Helper()
		p := packet.Packet{At: at, DeviceID: "gas-1", Seq: seq, Fields: fields, ClockUnsynced: unsynced, AlarmFields: alarm}
		if err := sp.Send(ctx, []buffer.Record{spRecordOf(t, &p)}); err != nil {
			t.Fatal(err)
		}
	}
	ch4 := func(v float64) packet.Field { return packet.Field{Name: "CH4", Value: packet.Float(v, 1)} }
	off := func(v int64) packet.Field { return packet.Field{Name: "Offset", Value: packet.Int(v)} }
	send(1, false, []string{"CH4"}, ch4(12.5), off(1))
	send(2, false, nil, ch4(1), off(2))
	send(3, true, nil, ch4(1.1), off(3))
	send(4, false, nil, ch4(1.2))
	ncmd := tahu.Encode(t, map[string]any{"timestamp": time.Now().UnixMilli(), "metrics": []map[string]any{
		{"name": "Node Control/Rebirth", "type": "Boolean", "value": true}}})[0]
	host := mqtttest.Client(t, b.Addr(), "host")
	if tok := host.Publish("spBv1.0/farm/NCMD/gw1", 1, false, ncmd); !tok.WaitTimeout(5*time.Second) || tok.Error() != nil {
		t.Fatal(tok.Error())
	}
	got := rec.wait(t, 8, "four DDATA and the births again")
	payloads := make([][]byte, len(got))
	for i := range got {
		payloads[i] = got[i].payload
	}
	dec := tahu.Decode(t, payloads...)

	// What each message must say of each metric: its value (JSON, as
	// Tahu gives it) and its Quality ("" for none).
	type mv struct{ value, quality string }
	names := map[string]string{} // alias → name, from the DBIRTH
	for _, m := range dec[1].Metrics {
		if m.Name != nil && m.Alias != nil {
			names[*m.Alias] = *m.Name
		}
	}
	wants := []struct {
		topic   string
		metrics map[string]mv
	}{
		{"DBIRTH/gw1/gas-1", map[string]mv{"CH4": {"null", "0"}, "CH4/Alarm": {"null", "0"}, "Offset": {"null", "0"}}},
		{"DDATA/gw1/gas-1", map[string]mv{"CH4": {"12.5", "192"}, "CH4/Alarm": {"true", "192"}, "Offset": {"1", "192"}}},
		{"DDATA/gw1/gas-1", map[string]mv{"CH4": {"1", ""}, "CH4/Alarm": {"false", ""}, "Offset": {"2", ""}}},
		{"DDATA/gw1/gas-1", map[string]mv{"CH4": {"1.100000023841858", "500"}, "CH4/Alarm": {"false", "500"}, "Offset": {"3", "500"}}},
		{"DDATA/gw1/gas-1", map[string]mv{"CH4": {"1.2000000476837158", "192"}, "CH4/Alarm": {"false", "192"}, "Offset": {"null", "0"}}},
		{"NBIRTH/gw1", nil},
		{"DBIRTH/gw1/gas-1", map[string]mv{"CH4": {"1.2000000476837158", ""}, "CH4/Alarm": {"false", ""}, "Offset": {"null", "0"}}},
	}
	for k, w := range wants {
		i := k + 1
		if i >= len(got) || got[i].topic != "spBv1.0/farm/"+w.topic {
			t.Fatalf("message %d: want %s", i, w.topic)
		}
		seen := map[string]bool{}
		for _, m := range dec[i].Metrics {
			name := ""
			switch {
			case m.Name != nil:
				name = *m.Name
			case m.Alias != nil:
				name = names[*m.Alias]
			}
			want, ok := w.metrics[name]
			if !ok {
				continue
			}
			seen[name] = true
			q := ""
			if p, ok := m.Properties["Quality"]; ok {
				if p.Type != "Int32" {
					t.Errorf("message %d (%s): %s: Quality of type %s, want Int32", i, w.topic, name, p.Type)
				}
				q = string(p.Value)
			}
			if v := strings.Trim(string(m.Value), `"`); v != want.value || q != want.quality {
				t.Errorf("message %d (%s): %s = %s, Quality %q; want %s, Quality %q", i, w.topic, name, v, q, want.value, want.quality)
			}
		}
		for name := range w.metrics {
			if !seen[name] {
				t.Errorf("message %d (%s): no metric %s", i, w.topic, name)
			}
		}
	}
	if t.Failed() {
		for i, m := range got {
			t.Logf("message %d: %s %s", i, m.topic, fmt.Sprint(dec[i].Metrics))
		}
	}
}
