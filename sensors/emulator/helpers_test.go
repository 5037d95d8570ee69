package emulator

import (
	"encoding/binary"
	"errors"
	"fmt"
	"io"
	"net"
	"os"
	"strings"
	"testing"
	"time"

	gm "github.com/goburrow/modbus"

	"fieldlink/internal/testtool"
	"fieldlink/sensors/profile"
)

// weatherYAML is a test profile using every type, byte order and area, a
// hole inside the holding span and gaps that read as 0:
//
//	holding 0 Temperature, 1 Humidity, 2-3 WindSpeed, 4 WindDirection,
//	        5 gap, 6-7 hole, 8-9 gap, 10-11 RainTotal, 12 status bits
//	        (FanOn bit 0, Alarm bit 3); readable up to 15
//	input   0 CH4, 1-2 gap, 3-6 Pressure, 8-11 Serial
//	coil    5 Relay; discrete 0 Door
const weatherYAML = `
model: TEST-WS
data_type: weather
holes:
  - {area: holding, from: 6, to: 7}
registers:
  - {name: Temperature, area: holding, address: 0, type: int16, scale: 0.1, unit: "°C", emulate: {model: diurnal, min: -5, max: 35}}
  - {name: Humidity, area: holding, address: 1, scale: 0.1, unit: "%RH"}
  - {name: WindSpeed, area: holding, address: 2, type: float32, order: CDAB, unit: m/s, emulate: {model: gust, min: 0, max: 25}}
  - {name: WindDirection, area: holding, address: 4, unit: "°", emulate: {model: angle, min: 0, max: 360}}
  - {name: RainTotal, area: holding, address: 10, type: uint32, scale: 0.1, unit: mm, emulate: {model: rain, counter: true, min: 0, max: 30}}
  - {name: FanOn, area: holding, address: 12, type: bool, bit: 0, emulate: {model: constant, min: 0}}
  - {name: Alarm, area: holding, address: 12, type: bool, bit: 3, emulate: {model: constant, min: 1, max: 1}}
  - {name: CH4, area: input, address: 0, scale: 0.01, unit: "%", emulate: {model: drift, min: 0, max: 2, spike: 0.05}}
  - {name: Pressure, area: input, address: 3, type: float64, order: DCBA, emulate: {model: walk, min: 990, max: 1030}}
  - {name: Serial, area: input, address: 8, type: string, length: 4}
  - {name: Door, area: discrete, address: 0, emulate: {model: constant, min: 1, max: 1}}
  - {name: Relay, area: coil, address: 5, emulate: {model: constant, min: 0}}
`

// counterYAML is a profile of 20 contiguous holding registers, for timing.
func counterYAML() string {
	var b strings.Builder
	b.WriteString("model: TEST-20\ndata_type: test\nregisters:\n")
	for i := range 20 {
		fmt.Fprintf(&b, "  - {name: R%02d, area: holding, address: %d, emulate: {model: walk, min: 0, max: 1000}}\n", i, i)
	}
	return b.String()
}

func parse(t testing.TB, name, yaml string) *profile.Profile {
	t.Helper()
	p, err := profile.Parse(name, name+".yaml", []byte(yaml))
	if err != nil {
		t.Fatalf("parse %s: %v", name, err)
	}
	return p
}

// fixedNow is a summer afternoon; with it every request serves the same values.
var fixedNow = time.Date(2025, 6, 1, 15, 4, 5, 0, time.UTC)

func fixedClock() time.Time { return fixedNow }

func newEmu(t testing.TB, devs []Device, opt Options) *Emulator {
	t.Helper()
	if opt.Now == nil {
		opt.Now = fixedClock
	}
	if opt.Logger == nil {
		opt.Logger = testtool.Logger(t)
	}
	e, err := New(devs, opt)
	if err != nil {
		t.Fatal(err)
	}
	return e
}

func dial(t testing.TB, addr string) net.Conn {
	t.Helper()
	c, err := net.Dial("tcp", addr)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { c.Close() })
	return c
}

// rtuRequest builds an RTU request with goburrow's packager, an
// implementation independent of the emulator's.
func rtuRequest(t testing.TB, slave, fc byte, data ...byte) []byte {
	t.Helper()
	h := gm.NewRTUClientHandler("")
	h.SlaveId = slave
	adu, err := h.Encode(&gm.ProtocolDataUnit{FunctionCode: fc, Data: data})
	if err != nil {
		t.Fatal(err)
	}
	return adu
}

// u16s packs 16-bit numbers big-endian, as Modbus request fields are.
func u16s(v ...uint16) []byte {
	b := make([]byte, 0, 2*len(v))
	for _, x := range v {
		b = binary.BigEndian.AppendUint16(b, x)
	}
	return b
}

// readRTU reads one RTU reply of the length its header implies, failing the
// test if none starts within wait. It returns nil on silence.
func readRTU(t testing.TB, c io.Reader, setDeadline func(time.Time) error, wait time.Duration) []byte {
	t.Helper()
	_ = setDeadline(time.Now().Add(wait))
	b := make([]byte, 0, 256)
	tmp := make([]byte, 256)
	want := 0
	for want == 0 || len(b) < want {
		n, err := c.Read(tmp)
		b = append(b, tmp[:n]...)
		if err != nil {
			if errors.Is(err, os.ErrDeadlineExceeded) && len(b) == 0 {
				return nil
			}
			t.Fatalf("read reply (have % x): %v", b, err)
		}
		if len(b) >= 3 {
			switch {
			case b[1]&0x80 != 0:
				want = 5
			case b[1] <= 4:
				want = 5 + int(b[2])
			default:
				want = 8
			}
		}
	}
	if len(b) != want {
		t.Fatalf("reply % x: %d bytes, want %d", b, len(b), want)
	}
	return b
}

// checkRTU verifies an RTU reply's CRC with goburrow and returns its PDU.
func checkRTU(t testing.TB, adu []byte) *gm.ProtocolDataUnit {
	t.Helper()
	if len(adu) < 4 {
		// goburrow's decoder slices a short frame out of range
		t.Fatalf("reply % x: no RTU frame (under 4 bytes)", adu)
	}
	h := gm.NewRTUClientHandler("")
	pdu, err := h.Decode(adu)
	if err != nil {
		t.Fatalf("reply % x: %v", adu, err)
	}
	return pdu
}

// decodeWords decodes every register of p in area that lies wholly inside
// data, a read starting at start, as a master would.
func decodeWords(p *profile.Profile, area profile.Area, start int, data []byte) map[string]float64 {
	out := map[string]float64{}
	for i := range p.Registers {
		r := &p.Registers[i]
		if r.Area != area || r.Type == profile.String {
			continue
		}
		off := int(r.Address) - start
		if off < 0 || 2*(off+r.Words()) > len(data) {
			continue
		}
		if v, ok := r.Decode(data[2*off : 2*(off+r.Words())]).Float64(); ok {
			out[r.Name] = v
		}
	}
	return out
}

// pipePort adapts one end of net.Pipe to Port, with go.bug.st/serial's
// timeout semantics (0, nil on timeout).
type pipePort struct {
	net.Conn
	timeout time.Duration
}

func (p *pipePort) SetReadTimeout(d time.Duration) error {
	p.timeout = d
	return nil
}

func (p *pipePort) Read(b []byte) (int, error) {
	var dl time.Time
	if p.timeout >= 0 {
		dl = time.Now().Add(p.timeout)
	}
	_ = p.Conn.SetReadDeadline(dl)
	n, err := p.Conn.Read(b)
	if n == 0 && errors.Is(err, os.ErrDeadlineExceeded) {
		return 0, nil
	}
	return n, err
}
