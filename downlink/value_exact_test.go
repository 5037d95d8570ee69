package downlink

import (
	"context"
	"fmt"
	"math"
	"strings"
	"sync"
	"testing"
	"testing/fstest"
	"time"

	"fieldlink/config"
	"fieldlink/packet"
	"fieldlink/sensors"
	"fieldlink/sensors/profile"
)

// limitsProfile has a writable register of every type.
const limitsProfile = `model: limits
manufacturer: test
data_type: Test
interval: 5s
registers:
  - {name: I16, area: holding, address: 0, type: int16, write: {}}
  - {name: U16, area: holding, address: 1, type: uint16, write: {}}
  - {name: I32, area: holding, address: 2, type: int32, write: {}}
  - {name: U32, area: holding, address: 4, type: uint32, write: {}}
  - {name: I64, area: holding, address: 6, type: int64, write: {}}
  - {name: U64, area: holding, address: 10, type: uint64, write: {}}
  - {name: F32, area: holding, address: 14, type: float32, write: {}}
  - {name: F32Step, area: holding, address: 16, type: float32, write: {}}
  - {name: HB, area: holding, address: 18, type: bool, write: {}}
  - {name: C, area: coil, address: 0, write: {}}
  - {name: Set, area: holding, address: 19, type: int16, scale: 0.1, write: {}}
  - {name: Off, area: holding, address: 20, type: uint16, scale: 0.5, offset: -40, write: {}}
  - {name: F64, area: holding, address: 21, type: float64, write: {}}
`

const limitsSite = `site: {id: "001"}
gateway: {id: gw-01}
buses:
  - name: field
    url: tcp://127.0.0.1:1502
    devices:
      - name: d
        profile: limits
        slave: 1
        writable:
          - {point: I16}
          - {point: U16}
          - {point: I32}
          - {point: U32}
          - {point: I64}
          - {point: U64}
          - {point: F32}
          - {point: F32Step, min: 0, step: 0.5}
          - {point: HB}
          - {point: C}
          - {point: Set}
          - {point: Off}
          - {point: F64}
uplink: {upstreams: [{url: 'mqtt://127.0.0.1:1883'}]}
downlink: {enabled: true, allow_unsigned: true}
`

// echoSite encodes every write as the bus does (refusing what the
// register's encoding refuses) and reads back what the device would hold:
// the bytes written, decoded.
type echoSite struct {
	mu     sync.Mutex
	regs   profile.Set
	writes []string
}

func (s *echoSite) Write(_ context.Context, device, point string, v float64) (sensors.WriteResult, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	reg, _ := s.regs["limits"].Register(point)
	_, _, data, err := reg.WriteRequest(v)
	if err != nil {
		return sensors.WriteResult{}, fmt.Errorf("device %s: %s: %w", device, point, err)
	}
	s.writes = append(s.writes, fmt.Sprintf("%s.%s=%x", device, point, data))
	if reg.Area == profile.Coil {
		return sensors.WriteResult{Readback: packet.Bool(data[0] != 0)}, nil
	}
	return sensors.WriteResult{Readback: reg.Decode(data)}, nil
}

func (s *echoSite) Latest(string, string, time.Time) (sensors.Reading, bool) {
	return sensors.Reading{}, false
}

func limitsEngine(t *testing.T) (*Engine, *echoSite, *memLedger) {
	t.Helper()
	c, err := config.Parse("site.yaml", []byte(limitsSite), func(string) (profile.Set, error) {
		return profile.Load(fstest.MapFS{"limits.yaml": {Data: []byte(limitsProfile)}}, "")
	})
	if err != nil {
		t.Fatal(err)
	}
	site, ledger := &echoSite{regs: c.Profiles}, &memLedger{seen: map[string]*Result{}}
	return NewEngine(c, Options{Points: site, Ledger: ledger, Now: func() time.Time { return e0 }}), site, ledger
}

// A value is written only when the register holds it exactly: after
// scale and offset, an integer register's raw value is a whole number
// within its type (exactly, not within a relative error), and what goes on
// the wire is that number; a float register's is within its precision.
// Anything else is refused before the wire, never rounded or clamped. At
// every type's limits.
func TestEngineValuesExactAtTypeLimits(t *testing.T) {
	for _, tc := range []struct {
		point, value string
		ok           bool
	}{
		{"I16", "32767", true}, {"I16", "-32768", true}, {"I16", "32768", false}, {"I16", "-32769", false},
		{"I16", "1.5", false}, {"I16", "32767.0000000001", false}, {"I16", "1e-320", false}, {"I16", "-0", true},
		{"U16", "65535", true}, {"U16", "0", true}, {"U16", "65536", false}, {"U16", "-1", false}, {"U16", "65534.99999999999", false},
		{"I32", "2147483647", true}, {"I32", "-2147483648", true}, {"I32", "2147483648", false}, {"I32", "-2147483649", false},
		{"I32", "1500000000.4", false}, {"I32", "1500000000.5", false}, {"I32", "1.5e9", true},
		{"U32", "4294967295", true}, {"U32", "4294967296", false}, {"U32", "4294967294.5", false}, {"U32", "-1", false},
		{"I64", "9007199254740992", true}, {"I64", "-9007199254740992", true}, {"I64", "9007199254740993", false},
		{"I64", "9223372036854775807", false}, {"I64", "-9223372036854775809", false}, {"I64", "1e-300", false},
		{"U64", "9007199254740992", true}, {"U64", "9007199254740993", false}, {"U64", "18446744073709551615", false},
		{"U64", "18446744073709551616", false}, {"U64", "-1", false},
		{"F32", "42.5", true}, {"F32", "0.1", true}, {"F32", "3.4028234663852886e38", true}, {"F32", "-3.4028234663852886e38", true},
		{"F32", "3.5e38", false}, {"F32", "1e-50", false}, {"F32", "1e-45", false}, {"F32", "0", true},
		{"F32Step", "10000000000.5", true}, {"F32Step", "10000000000.25", false}, {"F32Step", "0.5", true},
		{"F64", "1e-320", false}, {"F64", "1e-400", false}, {"F64", "1.7976931348623157e308", true}, {"F64", "2.5e-308", true},
		{"HB", "true", true}, {"HB", "false", true}, {"HB", "1", false}, {"HB", "2", false},
		{"C", "false", true}, {"C", "true", true}, {"C", "0", false},
		{"Set", "5.1", true}, {"Set", "5.15", false}, {"Set", "1e-320", false}, {"Set", "3276.7", true}, {"Set", "3276.8", false},
		{"Set", "-3276.8", true}, {"Set", "-3276.9", false}, {"Set", "0.30000000000000004", false},
		{"Off", "-40", true}, {"Off", "32727.5", true}, {"Off", "32728", false}, {"Off", "-40.5", false}, {"Off", "-39.75", false},
	} {
		t.Run(tc.point+"="+tc.value, func(t *testing.T) {
			e, site, ledger := limitsEngine(t)
			cmd := fmt.Sprintf(`{"id":"x","device":"d","point":%q,"value":%s,"issued_at":%q}`, tc.point, tc.value, e0.Format(time.RFC3339))
			res := e.Handle(context.Background(), []byte(cmd))
			if tc.ok {
				if res.Status != StatusDone || len(site.writes) != 1 {
					t.Fatalf("%s = %s: %s %q, writes %v; want done, written once", tc.point, tc.value, res.Status, res.Reason, site.writes)
				}
				return
			}
			if res.Status != StatusRejected || len(site.writes) != 0 {
				t.Fatalf("%s = %s: %s %q, writes %v; want rejected before the wire", tc.point, tc.value, res.Status, res.Reason, site.writes)
			}
			if len(ledger.log)+len(ledger.refused) != 1 {
				t.Fatalf("%s = %s: not audited", tc.point, tc.value)
			}
		})
	}
}

// A value that is not a finite number (a DCMD's NaN or ±Inf, a command
// built in code) is refused with words that say so, a result and an audit
// entry.
func TestEngineRefusesNonFiniteValues(t *testing.T) {
	for name, f := range map[string]float64{"NaN": math.NaN(), "+Inf": math.Inf(1), "-Inf": math.Inf(-1)} {
		e, site, ledger := limitsEngine(t)
		cmd := Command{ID: "nf", Device: "d", Point: "F32", Value: Number(f), IssuedAt: NewTimestamp(e0)}
		res := e.Run(context.Background(), cmd)
		if res.Status != StatusRejected || !strings.Contains(res.Reason, name) || strings.Contains(res.Reason, "null") {
			t.Errorf("%s: %s %q; want rejected, saying %s", name, res.Status, res.Reason, name)
		}
		if len(site.writes) != 0 || len(ledger.refused) != 1 {
			t.Errorf("%s: writes %v, %d refusals audited", name, site.writes, len(ledger.refused))
		}
	}
}
