package packet_test

import (
	"encoding/json"
	"testing"
	"time"

	"fieldlink/packet"
)

// bench20 is a weather and soil station's packet with twenty values, the
// size of the largest device in the farm profiles.
func bench20(t testing.TB) *packet.Packet {
	return &packet.Packet{
		At:        time.Date(2026, 11, 29, 8, 0, 0, 0, time.UTC),
		Loc:       mustZone(t, "Asia/Shanghai"),
		IDField:   "FarmId",
		SiteID:    "001",
		DataType:  "Weather",
		GatewayID: "gw-01",
		DeviceID:  "ws-1",
		Seq:       1234567,
		Fields: []packet.Field{
			{"Temperature", packet.Float(25.3, 1)},
			{"Humidity", packet.Float(50.25, 1)},
			{"WindSpeed", packet.Float(15.5, 1)},
			{"WindDir", packet.Int(270)},
			{"Light", packet.Uint(10240)},
			{"Rainfall", packet.Float(0, 1)},
			{"isRain", packet.Bool(false)},
			{"Pressure", packet.Float(1013.25, 2)},
			{"CO2", packet.Int(412)},
			{"PM25", packet.Float(35.2, 1)},
			{"PM10", packet.Float(61.7, 1)},
			{"SoilTemp", packet.Float(18.4, 1)},
			{"SoilMoisture", packet.Float(32.1, 1)},
			{"SoilEC", packet.Int(1250)},
			{"SoilPH", packet.Float(6.82, 2)},
			{"SoilN", packet.Int(45)},
			{"SoilP", packet.Int(18)},
			{"SoilK", packet.Int(120)},
			{"Battery", packet.Float(3.712, 3)},
			{"Signal", packet.Int(-71)},
		},
	}
}

func BenchmarkAppendJSON20(b *testing.B) {
	p := bench20(b)
	for _, bc := range []struct {
		name  string
		style packet.ValueStyle
	}{{"strings", packet.Strings}, {"numbers", packet.Numbers}} {
		b.Run(bc.name, func(b *testing.B) {
			buf := make([]byte, 0, 2048)
			b.ReportAllocs()
			b.SetBytes(int64(len(p.AppendJSON(nil, bc.style))))
			for b.Loop() {
				buf = p.AppendJSON(buf[:0], bc.style)
			}
		})
	}
}

// The way a Go developer writes the packet with encoding/json: a struct for
// the head, a map for the body (which encoding/json sorts by key, so the
// body order is lost: it is a baseline for speed, not for the format).
type jsonHead struct {
	Date      string
	Time      string
	FarmID    string `json:"FarmId"`
	DataType  string
	GatewayID string `json:"GatewayId"`
	DeviceID  string `json:"DeviceId"`
	Seq       uint64
	TS        string
}

type jsonStrings struct {
	DataHead jsonHead
	DataBody map[string]string
}

type jsonNumbers struct {
	DataHead jsonHead
	DataBody map[string]any
}

func head(p *packet.Packet) jsonHead {
	local := p.At.In(p.Loc)
	return jsonHead{
		Date:      local.Format("2006-01-02"),
		Time:      local.Format("15:04:05"),
		FarmID:    p.SiteID,
		DataType:  p.DataType,
		GatewayID: p.GatewayID,
		DeviceID:  p.DeviceID,
		Seq:       p.Seq,
		TS:        p.At.UTC().Format("2006-01-02T15:04:05.000Z"),
	}
}

// BenchmarkEncodingJSON20 does the same job as BenchmarkAppendJSON20, from
// the same readings to bytes, with encoding/json: format the times and
// values, fill the structs, Marshal. strings-marshal-only times Marshal
// alone on a prebuilt struct, for an encoder-to-encoder comparison.
func BenchmarkEncodingJSON20(b *testing.B) {
	p := bench20(b)
	b.Run("strings", func(b *testing.B) {
		b.ReportAllocs()
		for b.Loop() {
			body := make(map[string]string, len(p.Fields))
			for _, f := range p.Fields {
				body[f.Name] = f.Value.String()
			}
			if _, err := json.Marshal(jsonStrings{head(p), body}); err != nil {
				b.Fatal(err)
			}
		}
	})
	b.Run("numbers", func(b *testing.B) {
		b.ReportAllocs()
		for b.Loop() {
			body := make(map[string]any, len(p.Fields))
			for _, f := range p.Fields {
				switch f.Value.Kind() {
				case packet.KindString:
					body[f.Name] = f.Value.String()
				case packet.KindBool:
					n, _ := f.Value.Float64()
					body[f.Name] = n != 0
				default:
					body[f.Name], _ = f.Value.Float64()
				}
			}
			if _, err := json.Marshal(jsonNumbers{head(p), body}); err != nil {
				b.Fatal(err)
			}
		}
	})
	b.Run("strings-marshal-only", func(b *testing.B) {
		body := make(map[string]string, len(p.Fields))
		for _, f := range p.Fields {
			body[f.Name] = f.Value.String()
		}
		v := jsonStrings{head(p), body}
		b.ReportAllocs()
		for b.Loop() {
			if _, err := json.Marshal(v); err != nil {
				b.Fatal(err)
			}
		}
	})
}

func BenchmarkDecode20(b *testing.B) {
	data := bench20(b).AppendJSON(nil, packet.Strings)
	b.ReportAllocs()
	for b.Loop() {
		if _, err := packet.Decode(data); err != nil {
			b.Fatal(err)
		}
	}
}
