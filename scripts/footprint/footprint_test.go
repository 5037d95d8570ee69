package main

import (
	"encoding/json"
	"os"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"testing"
	"time"

	"fieldlink/config"
	firmwareprofiles "fieldlink/firmware-profiles"
	"fieldlink/packet"
	"fieldlink/sensors/profile"
)

// These tests need neither node, npm, Telegraf nor mosquitto: the
// footprint run itself belongs to `make bench`.

func loadFootprintProfile(t *testing.T, n int) (string, *profile.Profile) {
	t.Helper()
	dir := t.TempDir()
	text := profileYAML(deviceRegisters(n))
	if err := os.WriteFile(filepath.Join(dir, profileFor(n)+".yaml"), []byte(text), 0o644); err != nil {
		t.Fatal(err)
	}
	set, err := profile.Load(firmwareprofiles.FS, dir)
	if err != nil {
		t.Fatalf("the generated profile does not load: %v\n%s", err, text)
	}
	p, ok := set[profileFor(n)]
	if !ok {
		t.Fatalf("no profile %q in %v", profileFor(n), set.Names())
	}
	return dir, p
}

// nodeREDValue is what the flow's function node computes for a raw
// register (functionJS, in Go): two's complement for signed registers,
// raw × scale with the profile's decimals, no "-0". JavaScript's toFixed
// and strconv differ only on exact decimal ties, which a product of an
// integer and 0.1 or 0.01 never is.
func nodeREDValue(r register, raw uint16) string {
	v := float64(raw)
	if r.Signed {
		v = float64(int16(raw))
	}
	s := strconv.FormatFloat(v*r.Scale, 'f', r.Precision, 64)
	if f, _ := strconv.ParseFloat(s, 64); f == 0 {
		s = strconv.FormatFloat(0, 'f', r.Precision, 64)
	}
	return s
}

func TestProfileDecodesAsTheFlow(t *testing.T) {
	for _, n := range []int{20, 100} {
		testProfileDecodesAsTheFlow(t, n)
	}
}

func testProfileDecodesAsTheFlow(t *testing.T, n int) {
	_, p := loadFootprintProfile(t, n)
	registers := deviceRegisters(n)
	if len(p.Registers) != len(registers) || len(registers) != n {
		t.Fatalf("profile has %d registers, table %d, want %d", len(p.Registers), len(registers), n)
	}
	for i := range p.Registers {
		pr, r := &p.Registers[i], registers[i]
		if pr.Name != r.Name || int(pr.Address) != i {
			t.Fatalf("register %d: profile %s@%d, table %s", i, pr.Name, pr.Address, r.Name)
		}
		for _, raw := range []uint16{0, 1, 5, 99, 100, 1234, 9999, 32767, 32768, 65535} {
			got := pr.Decode([]byte{byte(raw >> 8), byte(raw)})
			enc := (&packet.Packet{Fields: []packet.Field{{Name: "v", Value: got}}}).AppendJSON(nil, packet.Strings)
			q, err := packet.Decode(enc)
			if err != nil {
				t.Fatal(err)
			}
			if g, w := q.Fields[0].Value.String(), nodeREDValue(r, raw); g != w {
				t.Errorf("%s raw %d: gateway %q, flow %q", r.Name, raw, g, w)
			}
		}
	}
}

func TestSiteFileIsValid(t *testing.T) {
	dir, _ := loadFootprintProfile(t, 20)
	site := filepath.Join(t.TempDir(), "site.yaml")
	text := siteYAML(ourGateway, ourTopic, dir, profileFor(20), []string{"127.0.0.1:1502"}, "127.0.0.1:1883", filepath.Join(t.TempDir(), "buf.db"), 10, time.Second)
	if err := os.WriteFile(site, []byte(text), 0o644); err != nil {
		t.Fatal(err)
	}
	c, err := config.Load(site, func(d string) (profile.Set, error) { return profile.Load(firmwareprofiles.FS, d) })
	if err != nil {
		t.Fatalf("%v\n%s", err, text)
	}
	if n := c.DeviceCount(); n != 10 {
		t.Errorf("%d devices, want 10", n)
	}
	if len(c.Buses) != 10/devicesPerConn {
		t.Errorf("%d buses, want %d", len(c.Buses), 10/devicesPerConn)
	}
	if c.Buffer.Durability.String() != "always" {
		t.Errorf("buffer durability %s: the footprint measures the default, always", c.Buffer.Durability)
	}
}

func TestFlows(t *testing.T) {
	data, err := flowsJSON("127.0.0.1", 1502, "127.0.0.1", 1883, 10, registers, time.Second, "0badcafe")
	if err != nil {
		t.Fatal(err)
	}
	var nodes []map[string]any
	if err := json.Unmarshal(data, &nodes); err != nil {
		t.Fatal(err)
	}
	ids := map[string]bool{}
	units := map[string]bool{}
	for _, n := range nodes {
		ids[n["id"].(string)] = true
		if n["type"] == "modbus-read" {
			units[n["unitid"].(string)] = true
			if n["rate"] != "1" || n["rateUnit"] != "s" || n["quantity"] != "20" || n["dataType"] != "HoldingRegister" {
				t.Errorf("modbus-read %v", n)
			}
		}
	}
	if len(units) != 10 || !units["1"] || !units["10"] {
		t.Errorf("unit ids %v, want 1..10", units)
	}
	// Every wire and config reference points at a node of the flow.
	for _, n := range nodes {
		for _, ref := range []string{"server", "broker", "z"} {
			if ref == "broker" && n["type"] == "mqtt-broker" {
				continue // there it is the broker's host
			}
			if v, ok := n[ref].(string); ok && v != "" && !ids[v] {
				t.Errorf("%s.%s = %q: no such node", n["id"], ref, v)
			}
		}
		if wires, ok := n["wires"].([]any); ok {
			for _, out := range wires {
				for _, to := range out.([]any) {
					if !ids[to.(string)] {
						t.Errorf("%s wired to %q: no such node", n["id"], to)
					}
				}
			}
		}
	}
	if js := functionJS("0badcafe", registers); !strings.Contains(js, `"Seq"`) && !strings.Contains(js, "Seq: seq") {
		t.Errorf("function node builds no Seq:\n%s", js)
	}
	data, _ = flowsJSON("127.0.0.1", 1502, "127.0.0.1", 1883, 1, registers, 500*time.Millisecond, "0badcafe")
	if !strings.Contains(string(data), `"rateUnit": "ms"`) || !strings.Contains(string(data), `"rate": "500"`) {
		t.Errorf("500ms interval not written in ms")
	}
}

func TestCheckPacket(t *testing.T) {
	at := time.Date(2026, 11, 29, 8, 0, 0, 0, time.UTC)
	good := func() *packet.Packet {
		p := &packet.Packet{At: at, SiteID: siteID, DataType: dataType, GatewayID: ourGateway,
			DeviceID: deviceName(3), Seq: 7, Epoch: "0badcafe"}
		for _, r := range registers {
			p.Fields = append(p.Fields, packet.Field{Name: r.Name, Value: packet.String(nodeREDValue(r, 123))})
		}
		return p
	}
	enc := good().AppendJSON(nil, packet.Strings)
	numbers := good()
	for i := range numbers.Fields {
		numbers.Fields[i].Value = packet.Float(12.3, 1)
	}
	a, err := checkPacket(enc, ourGateway, deviceName(3), 10, registers, false)
	if err != nil || a.Seq != 7 || a.Device != deviceName(3) {
		t.Fatalf("good packet: %+v, %v\n%s", a, err, enc)
	}
	// On a machine whose clock is not synchronised the gateway marks its
	// packets; they are the same packets.
	unsynced := good()
	unsynced.ClockUnsynced = true
	if _, err := checkPacket(unsynced.AppendJSON(nil, packet.Strings), ourGateway, deviceName(3), 10, registers, false); err != nil {
		t.Errorf("a packet marked ClockUnsynced: %v", err)
	}
	bad := map[string][]byte{
		"other gateway":   good().AppendJSON(nil, packet.Strings),
		"numbers":         numbers.AppendJSON(nil, packet.Numbers),
		"head key order":  []byte(strings.Replace(string(enc), `"Date":"2026-11-29","Time":"08:00:00",`, `"Time":"08:00:00","Date":"2026-11-29",`, 1)),
		"decimals":        []byte(strings.Replace(string(enc), `"SoilPH":"1.23"`, `"SoilPH":"1.2"`, 1)),
		"missing a field": []byte(strings.Replace(string(enc), `,"Noise":"12.3"`, ``, 1)),
	}
	for name, b := range bad {
		gateway := ourGateway
		if name == "other gateway" {
			gateway = theirGateway
		}
		if _, err := checkPacket(b, gateway, deviceName(3), 10, registers, false); err == nil {
			t.Errorf("%s: accepted\n%s", name, b)
		}
	}
	if _, err := checkPacket(enc, ourGateway, deviceName(3), 2, registers, false); err == nil {
		t.Errorf("device 3 of 2 accepted")
	}
	// Telegraf's keys come sorted: accepted in any order only when asked,
	// and a missing value is still refused.
	telegraf := []byte(`{"DataBody":{` + strings.Join(sortedBody(good()), ",") + `},"DataHead":{"DataType":"Agro","Date":"2026-11-29","DeviceId":"station-03","Epoch":"0badcafe","FarmId":"001","GatewayId":"gw-footprint-telegraf","Seq":7,"TS":"2026-11-29T08:00:00Z","Time":"08:00:00"}}`)
	if _, err := checkPacket(telegraf, telegrafGateway, deviceName(3), 10, registers, true); err != nil {
		t.Errorf("sorted keys refused with anyOrder: %v\n%s", err, telegraf)
	}
	if _, err := checkPacket(telegraf, telegrafGateway, deviceName(3), 10, registers, false); err == nil {
		t.Errorf("sorted keys accepted in order")
	}
	short := []byte(strings.Replace(string(telegraf), `"Noise":"12.3",`, ``, 1))
	if _, err := checkPacket(short, telegrafGateway, deviceName(3), 10, registers, true); err == nil {
		t.Errorf("a missing value accepted with anyOrder")
	}
}

func TestProc(t *testing.T) {
	f, err := statFields([]byte("42 (a) b (c)) S 7 42 42 0 -1 4194560 100 0 0 0 250 50 0 0 20 0 1 0"))
	if err != nil || string(f[0]) != "S" || string(f[1]) != "7" || string(f[11]) != "250" || string(f[12]) != "50" {
		t.Fatalf("statFields: %q, %v", f, err)
	}
	kb := parseStatusKB([]byte("Name:\tx\nVmHWM:\t  2048 kB\nVmRSS:\t  1024 kB\nRssAnon:\t 10 kB\n"), "VmRSS", "VmHWM", "RssFile")
	if kb[0] != 1024*1024 || kb[1] != 2048*1024 || kb[2] != 0 {
		t.Errorf("parseStatusKB: %v", kb)
	}
	if w := parseIOWritten([]byte("rchar: 10\nwchar: 20\nread_bytes: 0\nwrite_bytes: 40960\ncancelled_write_bytes: 0\n")); w != 40960 {
		t.Errorf("parseIOWritten: %d, want 40960", w)
	}
	if w := parseIOWritten([]byte("rchar: 10\n")); w != -1 {
		t.Errorf("parseIOWritten without write_bytes: %d, want -1", w)
	}
	if m := median([]int64{5, 1, 3}); m != 3 {
		t.Errorf("median odd: %d", m)
	}
	if m := median([]int64{4, 1, 3, 2}); m != 2 {
		t.Errorf("median even: %d", m)
	}
	u, err := measure(os.Getpid())
	if err != nil || u.RSS <= 0 || u.Procs < 1 || u.HWM < u.RSS/2 {
		t.Errorf("measure self: %+v, %v", u, err)
	}
}

// Telegraf's configuration reads every device's registers with the
// profile's types and scales, publishes at QoS 1 on the counted topic, and
// its JSONata writes every DataHead key in order and every register with
// the profile's decimals.
func TestTelegrafConf(t *testing.T) {
	regs := deviceRegisters(100)
	conf := telegrafConf([]string{"127.0.0.1:1502"}, "127.0.0.1:1883", 3, regs, 100*time.Millisecond, "0badcafe")
	for _, want := range []string{
		`controller = "tcp://127.0.0.1:1502"`, `servers = ["tcp://127.0.0.1:1883"]`, "qos = 1",
		`interval = "100ms"`, `flush_interval = "100ms"`, `topic = '` + telegrafTopic + `{{ .Name }}'`,
		`measurement = "station-03"`, "slave_id = 3", `json_timestamp_units = "1ms"`,
		`{ address=0, name="AirTemperature", type="INT16", scale=0.1 }`,
		`{ address=99, name="BatteryVoltage5", type="UINT16", scale=0.01 }`,
		`{ address=5, name="WindDirection", type="UINT16", scale=1.0 }`,
		`"BatteryVoltage5": $formatNumber(fields.BatteryVoltage5, "0.00")`,
		`"WindDirection3": $formatNumber(fields.WindDirection3, "0")`,
	} {
		if !strings.Contains(conf, want) {
			t.Errorf("telegraf.conf lacks %s", want)
		}
	}
	if n := strings.Count(conf, "[[inputs.modbus.request]]"); n != 3 {
		t.Errorf("%d requests, want one per device (3)", n)
	}
	ports := make([]string, 100/devicesPerConn)
	for i := range ports {
		ports[i] = "127.0.0.1:" + strconv.Itoa(1502+i)
	}
	conf = telegrafConf(ports, "127.0.0.1:1883", 100, regs, 100*time.Millisecond, "0badcafe")
	if n := strings.Count(conf, "[[inputs.modbus]]"); n != 100/devicesPerConn {
		t.Errorf("%d connections for 100 devices, want %d (as the gateway's buses)", n, 100/devicesPerConn)
	}
	js := jsonata(regs, "0badcafe")
	at := -1
	for _, k := range headKeys {
		i := strings.Index(js, `"`+k+`":`)
		if i <= at {
			t.Fatalf("DataHead key %s missing or out of order in\n%s", k, js)
		}
		at = i
	}
	if n := strings.Count(js, "$formatNumber("); n != len(regs) {
		t.Errorf("%d DataBody values, want %d", n, len(regs))
	}
}

// sortedBody is p's DataBody members as JSON, sorted by key.
func sortedBody(p *packet.Packet) []string {
	var out []string
	for _, f := range p.Fields {
		out = append(out, strconv.Quote(f.Name)+":"+strconv.Quote(f.Value.String()))
	}
	slices.Sort(out)
	return out
}
