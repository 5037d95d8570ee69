package testtool_test

import (
	"math"
	"strings"
	"testing"
	"time"

	"fieldlink/internal/testtool"
	"fieldlink/packet"
)

// TestPacketSchema checks that the packet schema takes what the packet
// package writes, in both encodings and in every DataHead variant, and
// catches the mistakes a platform would trip on.
func TestPacketSchema(t *testing.T) {
	at := time.Date(2026, 11, 29, 16, 55, 22, 0, time.UTC)
	cst := time.FixedZone("UTC+8", 8*3600)
	good := []packet.Packet{
		{At: at, Loc: cst, IDField: "MineId", SiteID: "M001", DataType: "Gas", GatewayID: "gw-mine", DeviceID: "ch4-1", Seq: 29, Epoch: "7f3a09c1",
			AlarmFields: []string{"CH4"}, Fields: []packet.Field{{Name: "CH4", Value: packet.Float(1.25, 2)}}},
		{At: at, SiteID: "001", DataType: "Rain", GatewayID: "gw-01", DeviceID: "rain-1", Seq: 1, Epoch: "poll-00ab12cd", ClockUnsynced: true,
			Fields: []packet.Field{{Name: "isRain", Value: packet.Bool(false)}, {Name: "Rainfall", Value: packet.Float(0, 1)}, {Name: "Bad", Value: packet.Float(math.NaN(), 1)}}},
		{At: at, SiteID: "001", DataType: "Command", GatewayID: "gw-01", DeviceID: "valve-1", Seq: 7, Epoch: "7f3a09c1",
			Fields: []packet.Field{{Name: "CommandId", Value: packet.String("c-1")}, {Name: "Point", Value: packet.String("Open")},
				{Name: "Value", Value: packet.String("True")}, {Name: "Status", Value: packet.String("done")}, {Name: "Readback", Value: packet.String("True")},
				{Name: "Actor", Value: packet.String("platform")}, {Name: "Reason", Value: packet.String("")}}},
	}
	for i := range good {
		for _, style := range []packet.ValueStyle{packet.Strings, packet.Numbers} {
			p := good[i].AppendJSON(nil, style)
			if err := testtool.CheckPacket(p); err != nil {
				t.Errorf("a packet the gateway writes fails the schema: %v\n%s", err, p)
			}
		}
	}

	const ok = `{"DataHead":{"Date":"2026-11-30","Time":"00:55:22","MineId":"M001","DataType":"Gas","GatewayId":"gw","DeviceId":"ch4-1","Seq":29,"TS":"2026-11-29T16:55:22Z","Epoch":"7f3a09c1","Alarm":"True","AlarmFields":["CH4"]},"DataBody":{"CH4":"1.25"}}`
	if err := testtool.CheckPacket([]byte(ok)); err != nil {
		t.Fatalf("the reference packet fails: %v", err)
	}
	for _, tc := range []struct{ name, from, to string }{
		{"Seq missing", `"Seq":29,`, ``},
		{"Seq a string", `"Seq":29`, `"Seq":"29"`},
		{"Seq zero", `"Seq":29`, `"Seq":0`},
		{"Date in another form", `"2026-11-30"`, `"30/11/2026"`},
		{"Time with a fraction", `"00:55:22"`, `"00:55:22.5"`},
		{"TS with an offset", `"2026-11-29T16:55:22Z"`, `"2026-11-29T16:55:22+00:00"`},
		{"an unknown DataHead key", `"Seq":29`, `"Seq":29,"Sequence":29`},
		{"both site ids", `"MineId":"M001"`, `"MineId":"M001","FarmId":"001"`},
		{"no site id", `"MineId":"M001",`, ``},
		{"Alarm without AlarmFields", `,"AlarmFields":["CH4"]`, ``},
		{"Alarm as a boolean", `"Alarm":"True"`, `"Alarm":true`},
		{"AlarmFields naming no body key", `["CH4"]`, `["CO"]`},
		{"an epoch in another form", `"7f3a09c1"`, `"7F3A"`},
		{"ClockUnsynced false", `"Epoch":"7f3a09c1"`, `"Epoch":"7f3a09c1","ClockUnsynced":"False"`},
		{"an empty DeviceId", `"ch4-1"`, `""`},
		{"a body value an object", `"1.25"`, `{"v":1.25}`},
		{"no DataBody", `,"DataBody":{"CH4":"1.25"}`, ``},
		{"a Command without its Status", `"Gas"`, `"Command"`},
	} {
		broken := strings.Replace(ok, tc.from, tc.to, 1)
		if broken == ok {
			t.Fatalf("%s: %q not in the packet", tc.name, tc.from)
		}
		if err := testtool.CheckPacket([]byte(broken)); err == nil {
			t.Errorf("%s: the schema takes it:\n%s", tc.name, broken)
		} else if tc.name == "Seq a string" {
			t.Logf("%s: %v", tc.name, err)
		}
	}
}
