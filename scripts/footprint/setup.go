package main

import (
	"encoding/json"
	"fmt"
	"strconv"
	"strings"
	"time"
)

// The footprint site's identity, the same on both sides except GatewayId.
const (
	siteID          = "001"
	dataType        = "Agro"
	ourGateway      = "gw-footprint"
	baseGateway     = "gw-footprint-base"
	theirGateway    = "gw-footprint-nodered"
	telegrafGateway = "gw-footprint-telegraf"
	ourTopic        = "footprint/fieldlink/"
	baseTopic       = "footprint/base/"
	theirTopic      = "footprint/node-red/"
	telegrafTopic   = "footprint/telegraf/"
)

// register is one holding register of the emulated device: what the
// profile declares, and what the Node-RED function needs to decode it the
// way the gateway does (two's complement, raw × scale, fixed decimals).
type register struct {
	Name      string
	Signed    bool
	Scale     float64
	Precision int
	Model     string // emulator model
	Min, Max  float64
}

// registers is the device: 20 contiguous holding registers, 0..19, so that
// both the gateway's planner and Node-RED read each device with one request.
var registers = []register{
	{"AirTemperature", true, 0.1, 1, "diurnal", 4, 31},
	{"AirHumidity", false, 0.1, 1, "diurnal", 35, 95},
	{"DewPoint", true, 0.1, 1, "diurnal", 1, 18},
	{"Pressure", false, 0.1, 1, "walk", 985, 1030},
	{"WindSpeed", false, 0.1, 1, "gust", 0, 18},
	{"WindDirection", false, 1, 0, "angle", 0, 359},
	{"Rainfall", false, 0.1, 1, "walk", 0, 12},
	{"Illuminance", false, 1, 0, "diurnal", 0, 60000},
	{"SolarRadiation", false, 1, 0, "diurnal", 0, 1100},
	{"CO2", false, 1, 0, "walk", 400, 1200},
	{"SoilTemperature", true, 0.1, 1, "diurnal", 11, 19},
	{"SoilMoisture", false, 0.1, 1, "walk", 12, 42},
	{"SoilConductivity", false, 1, 0, "walk", 150, 900},
	{"SoilPH", false, 0.01, 2, "walk", 5.5, 7.8},
	{"Nitrogen", false, 1, 0, "walk", 20, 60},
	{"Phosphorus", false, 1, 0, "walk", 15, 50},
	{"Potassium", false, 1, 0, "walk", 30, 120},
	{"LeafWetness", false, 0.1, 1, "walk", 0, 100},
	{"Noise", false, 0.1, 1, "walk", 30, 90},
	{"BatteryVoltage", false, 0.01, 2, "walk", 3.3, 4.2},
}

// devicesPerConn is how many devices share one Modbus TCP connection (one
// emulator on its own port, one bus of the gateway, one [[inputs.modbus]]
// of Telegraf): a connection polls one request at a time, and 100 devices
// at 100 ms are more than one can poll on a busy 2-core machine.
const devicesPerConn = 10

// deviceRegisters is the register map of an emulated device with n
// contiguous holding registers (1..125): the 20 of registers, then the same
// again under numbered names ("AirTemperature2", ...), so that one request
// reads each device on both sides.
func deviceRegisters(n int) []register {
	out := make([]register, n)
	for i := range out {
		out[i] = registers[i%len(registers)]
		if i >= len(registers) {
			out[i].Name += strconv.Itoa(i/len(registers) + 1)
		}
	}
	return out
}

// profileFor is the firmware profile name of devices with n registers.
func profileFor(n int) string { return "footprint-" + strconv.Itoa(n) }

// deviceName is the DeviceId of slave i (1-based) on both sides.
func deviceName(i int) string { return fmt.Sprintf("station-%02d", i) }

func num(f float64) string { return strconv.FormatFloat(f, 'f', -1, 64) }

// profileYAML is the firmware profile of the emulated device with these
// registers, written to a temporary profiles directory for `gateway
// emulate` and `gateway run`.
func profileYAML(regs []register) string {
	var b strings.Builder
	b.WriteString(`model: FP-` + strconv.Itoa(len(regs)) + ` (footprint test station)
manufacturer: fieldlink
description: >-
  A made-up weather and soil station with contiguous holding registers,
  for the footprint comparison (scripts/footprint). Not a real device.
follows: generic
data_type: ` + dataType + `
interval: 1s
serial: {baud: 9600, parity: N, data_bits: 8, stop_bits: 1}
registers:
`)
	for i, r := range regs {
		typ := "uint16"
		if r.Signed {
			typ = "int16"
		}
		fmt.Fprintf(&b, "  - {name: %s, area: holding, address: %d, type: %s, scale: %s, precision: %d, emulate: {model: %s, min: %s, max: %s}}\n",
			r.Name, i, typ, num(r.Scale), r.Precision, r.Model, num(r.Min), num(r.Max))
	}
	return b.String()
}

// siteYAML is the gateway's site file: one Modbus TCP bus to the emulator,
// every device at interval, delivery at QoS 1 to the broker under topic,
// the buffer at its defaults (durability: always), metrics off.
func siteYAML(gateway, topic, profilesDir, profile string, emulators []string, broker, bufferPath string, devices int, interval time.Duration) string {
	var b strings.Builder
	fmt.Fprintf(&b, `site: {id: %q, id_field: FarmId, timezone: UTC}
gateway: {id: %s}
profiles_dir: %q
metrics: {listen: "off"}
buses:
`, siteID, gateway, profilesDir)
	for i := 1; i <= devices; i++ {
		if (i-1)%devicesPerConn == 0 {
			fmt.Fprintf(&b, "  - name: footprint-%d\n    url: tcp://%s\n    timeout: 1s\n    devices:\n", (i-1)/devicesPerConn+1, emulators[(i-1)/devicesPerConn])
		}
		fmt.Fprintf(&b, "      - {name: %s, profile: %s, slave: %d, interval: %s}\n", deviceName(i), profile, i, interval)
	}
	fmt.Fprintf(&b, `buffer: {path: %q}
uplink:
  upstreams:
    - {url: "mqtt://%s", topic: "%s{device}", qos: 1}
`, bufferPath, broker, topic)
	return b.String()
}

// functionJS is the Node-RED function node that turns a modbus-read
// result (msg.payload: the 20 raw registers, msg.topic: the DeviceId) into
// the packet the gateway would send, byte for byte in shape: DataHead keys
// in the same order, DataBody values as strings with the profile's
// decimals, Seq counting up per gateway.
func functionJS(epoch string, registers []register) string {
	type reg struct {
		Name      string  `json:"n"`
		Signed    bool    `json:"s"`
		Scale     float64 `json:"k"`
		Precision int     `json:"p"`
	}
	regs := make([]reg, len(registers))
	for i, r := range registers {
		regs[i] = reg{r.Name, r.Signed, r.Scale, r.Precision}
	}
	table, _ := json.Marshal(regs) // plain structs: cannot fail
	return `const regs = ` + string(table) + `;
const raw = msg.payload;
if (!Array.isArray(raw) || raw.length !== regs.length) {
    node.warn("unexpected modbus-read payload from " + msg.topic);
    return null;
}
const seq = (context.get("seq") || 0) + 1;
context.set("seq", seq);
const ts = new Date().toISOString();
const body = {};
for (let i = 0; i < regs.length; i++) {
    const r = regs[i];
    let v = raw[i];
    if (r.s && v > 32767) v -= 65536;
    let s = (v * r.k).toFixed(r.p);
    if (Number(s) === 0) s = (0).toFixed(r.p); // never "-0.0", as the gateway
    body[r.n] = s;
}
const head = {
    Date: ts.slice(0, 10),
    Time: ts.slice(11, 19),
    FarmId: ` + strconv.Quote(siteID) + `,
    DataType: ` + strconv.Quote(dataType) + `,
    GatewayId: ` + strconv.Quote(theirGateway) + `,
    DeviceId: msg.topic,
    Seq: seq,
    TS: ts.slice(0, 19) + "Z",
    Epoch: ` + strconv.Quote(epoch) + `,
};
return {topic: ` + strconv.Quote(theirTopic) + ` + msg.topic, payload: JSON.stringify({DataHead: head, DataBody: body})};
`
}

// flowsJSON is Node-RED's flow: one Modbus TCP client to the emulator (one
// connection, as the gateway's bus), one modbus-read per device polling its
// 20 holding registers every interval, one function node building the
// packets, one mqtt out at QoS 1 to the broker.
func flowsJSON(emulatorHost string, emulatorPort int, brokerHost string, brokerPort, devices int, registers []register, interval time.Duration, epoch string) ([]byte, error) {
	type obj = map[string]any
	flow := []obj{
		{"id": "fp-tab", "type": "tab", "label": "footprint", "disabled": false, "info": ""},
		{
			"id": "fp-modbus", "type": "modbus-client", "name": "emulator", "clienttype": "tcp",
			"bufferCommands": true, "stateLogEnabled": false, "queueLogEnabled": false, "failureLogEnabled": true,
			"tcpHost": emulatorHost, "tcpPort": strconv.Itoa(emulatorPort), "tcpType": "DEFAULT",
			"serialPort": "/dev/ttyUSB", "serialType": "RTU-BUFFERD", "serialBaudrate": "9600",
			"serialDatabits": "8", "serialStopbits": "1", "serialParity": "none",
			"serialConnectionDelay": "100", "serialAsciiResponseStartDelimiter": "0x3A",
			"unit_id": "1", "commandDelay": "1", "clientTimeout": "1000",
			"reconnectOnTimeout": true, "reconnectTimeout": "2000", "parallelUnitIdsAllowed": true,
			"showErrors": false, "showWarnings": true, "showLogs": false,
		},
		{
			"id": "fp-broker", "type": "mqtt-broker", "name": "broker",
			"broker": brokerHost, "port": strconv.Itoa(brokerPort), "clientid": "", "autoConnect": true,
			"usetls": false, "protocolVersion": "4", "keepalive": "60", "cleansession": true,
			"autoUnsubscribe": true, "birthTopic": "", "closeTopic": "", "willTopic": "",
		},
		{
			"id": "fp-packet", "type": "function", "z": "fp-tab", "name": "DataHead/DataBody",
			"func": functionJS(epoch, registers), "outputs": 1, "timeout": 0, "noerr": 0,
			"initialize": "", "finalize": "", "libs": []any{}, "x": 400, "y": 100,
			"wires": []any{[]any{"fp-mqtt"}},
		},
		{
			"id": "fp-mqtt", "type": "mqtt out", "z": "fp-tab", "name": "", "topic": "", "qos": "1",
			"retain": "false", "respTopic": "", "contentType": "", "userProps": "", "correl": "",
			"expiry": "", "broker": "fp-broker", "x": 600, "y": 100, "wires": []any{},
		},
	}
	rate, unit := strconv.FormatInt(interval.Milliseconds(), 10), "ms"
	if interval%time.Second == 0 {
		rate, unit = strconv.FormatInt(int64(interval/time.Second), 10), "s"
	}
	for i := 1; i <= devices; i++ {
		flow = append(flow, obj{
			"id": fmt.Sprintf("fp-read-%02d", i), "type": "modbus-read", "z": "fp-tab", "name": deviceName(i),
			"topic": deviceName(i), "showStatusActivities": false, "logIOActivities": false,
			"showErrors": false, "showWarnings": true, "unitid": strconv.Itoa(i),
			"dataType": "HoldingRegister", "adr": "0", "quantity": strconv.Itoa(len(registers)),
			"rate": rate, "rateUnit": unit, "delayOnStart": false, "startDelayTime": "",
			"server": "fp-modbus", "useIOFile": false, "ioFile": "", "useIOForPayload": false,
			"emptyMsgOnFail": false, "x": 150, "y": 40 * i, "wires": []any{[]any{"fp-packet"}, []any{}},
		})
	}
	return json.MarshalIndent(flow, "", "  ")
}

// settingsJS is a lean Node-RED settings file, in Node-RED's favour: no
// editor, no admin or node HTTP endpoints, no diagnostics, in-memory
// context, warnings only. With editorPort > 0 the editor and admin API
// serve on that loopback port instead, as in a default install.
func settingsJS(flowFile string, editorPort int) string {
	http := `    uiPort: 0,
    httpAdminRoot: false,
    httpNodeRoot: false,
    disableEditor: true,
`
	if editorPort > 0 {
		http = `    uiPort: ` + strconv.Itoa(editorPort) + `,
`
	}
	return `module.exports = {
    flowFile: ` + strconv.Quote(flowFile) + `,
    credentialSecret: false,
    uiHost: "127.0.0.1",
` + http + `
    diagnostics: { enabled: false, ui: false },
    runtimeState: { enabled: false, ui: false },
    telemetry: { enabled: false },
    externalModules: { autoInstall: false, palette: { allowInstall: false }, modules: { allowInstall: false } },
    contextStorage: { default: { module: "memory" } },
    logging: { console: { level: "warn", metrics: false, audit: false } },
};
`
}
