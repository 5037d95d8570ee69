package packet_test

import (
	"fmt"
	"time"

	"fieldlink/packet"
)

// A packet built from a poll and encoded in both of the site file's
// value styles (packet.values: strings, number), into a buffer reused
// across packets.
func Example() {
	p := packet.Packet{
		At:          time.Date(2026, 11, 29, 8, 0, 0, 0, time.UTC),
		Loc:         time.FixedZone("CST", 8*3600),
		IDField:     "MineId",
		SiteID:      "M-07",
		DataType:    "Gas",
		GatewayID:   "gw-3",
		DeviceID:    "gas-12",
		Seq:         9,
		AlarmFields: []string{"CH4"},
		Fields: []packet.Field{
			{"CH4", packet.Float(1.25, 2)},
			{"CO", packet.Int(12)},
			{"Fan", packet.Bool(true)},
		},
	}
	buf := make([]byte, 0, 512) // reuse across packets: no allocation
	buf = p.AppendJSON(buf[:0], packet.Strings)
	fmt.Println(string(buf))
	buf = p.AppendJSON(buf[:0], packet.Numbers)
	fmt.Println(string(buf))
	// Output:
	// {"DataHead":{"Date":"2026-11-29","Time":"16:00:00","MineId":"M-07","DataType":"Gas","GatewayId":"gw-3","DeviceId":"gas-12","Seq":9,"TS":"2026-11-29T08:00:00.000Z","Alarm":"True","AlarmFields":["CH4"]},"DataBody":{"CH4":"1.25","CO":"12","Fan":"True"}}
	// {"DataHead":{"Date":"2026-11-29","Time":"16:00:00","MineId":"M-07","DataType":"Gas","GatewayId":"gw-3","DeviceId":"gas-12","Seq":9,"TS":"2026-11-29T08:00:00.000Z","Alarm":"True","AlarmFields":["CH4"]},"DataBody":{"CH4":1.25,"CO":12,"Fan":true}}
}
