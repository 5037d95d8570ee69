package main

import (
	"encoding/json"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"testing"
	"time"

	"fieldlink/config"
	firmwareprofiles "fieldlink/firmware-profiles"
	"fieldlink/packet"
	"fieldlink/sensors/profile"
)

// These tests need neither node, npm nor mosquitto: the footprint run
// itself belongs to `make bench`.

func loadFootprintProfile(t *testing.T) (string, *profile.Profile) {
	t.Helper()
	dir := t.TempDir()
	if err := os.WriteFile(filepath.Join(dir, profileName+".yaml"), []byte(profileYAML()), 0o644); err != nil {
		t.Fatal(err)
	}
	set, err := profile.Load(firmwareprofiles.FS, dir)
	if err != nil {
		t.Fatalf("the generated profile does not load: %v\n%s", err, profileYAML())
	}
	p, ok := set[profileName]
	if !ok {
		t.Fatalf("no profile %q in %v", profileName, set.Names())
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
	_, p := loadFootprintProfile(t)
	if len(p.Registers) != len(registers) || len(registers) != 20 {
		t.Fatalf("profile has %d registers, table %d, want 20", len(p.Registers), len(registers))
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
	dir, _ := loadFootprintProfile(t)
	site := filepath.Join(t.TempDir(), "site.yaml")
	text := siteYAML(dir, "127.0.0.1:1502", "127.0.0.1:1883", filepath.Join(t.TempDir(), "buf.db"), 10, time.Second)
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
}

func TestFlows(t *testing.T) {
	data, err := flowsJSON("127.0.0.1", 1502, "127.0.0.1", 1883, 10, time.Second, "0badcafe")
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
	if js := functionJS("0badcafe"); !strings.Contains(js, `"Seq"`) && !strings.Contains(js, "Seq: seq") {
		t.Errorf("function node builds no Seq:\n%s", js)
	}
	data, _ = flowsJSON("127.0.0.1", 1502, "127.0.0.1", 1883, 1, 500*time.Millisecond, "0badcafe")
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
	a, err := checkPacket(enc, ourGateway, deviceName(3), 10)
	if err != nil || a.Seq != 7 || a.Device != deviceName(3) {
		t.Fatalf("good packet: %+v, %v\n%s", a, err, enc)
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
		if _, err := checkPacket(b, gateway, deviceName(3), 10); err == nil {
			t.Errorf("%s: accepted\n%s", name, b)
		}
	}
	if _, err := checkPacket(enc, ourGateway, deviceName(3), 2); err == nil {
		t.Errorf("device 3 of 2 accepted")
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
