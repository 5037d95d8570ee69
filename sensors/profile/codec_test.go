package profile

import (
	"encoding/binary"
	"math"
	"math/rand/v2"
	"strconv"
	"testing"

	"fieldlink/packet"
)

// perm gives, for each order, where each wire byte comes from in the
// big-endian representation, written out by hand from the order names.
var perm = map[int]map[Order][]int{
	2: {ABCD: {0, 1}, CDAB: {0, 1}, BADC: {1, 0}, DCBA: {1, 0}},
	4: {ABCD: {0, 1, 2, 3}, CDAB: {2, 3, 0, 1}, BADC: {1, 0, 3, 2}, DCBA: {3, 2, 1, 0}},
	8: {ABCD: {0, 1, 2, 3, 4, 5, 6, 7}, CDAB: {6, 7, 4, 5, 2, 3, 0, 1}, BADC: {1, 0, 3, 2, 5, 4, 7, 6}, DCBA: {7, 6, 5, 4, 3, 2, 1, 0}},
}

func toWire(be []byte, o Order) []byte {
	w := make([]byte, len(be))
	for i, src := range perm[len(be)][o] {
		w[i] = be[src]
	}
	return w
}

// expect decodes big-endian bytes with encoding/binary and math, the
// reference the codec is held to.
func expect(t Type, be []byte) packet.Value {
	switch t {
	case Int16:
		return packet.Int(int64(int16(binary.BigEndian.Uint16(be))))
	case Uint16:
		return packet.Uint(uint64(binary.BigEndian.Uint16(be)))
	case Int32:
		return packet.Int(int64(int32(binary.BigEndian.Uint32(be))))
	case Uint32:
		return packet.Uint(uint64(binary.BigEndian.Uint32(be)))
	case Int64:
		return packet.Int(int64(binary.BigEndian.Uint64(be)))
	case Uint64:
		return packet.Uint(binary.BigEndian.Uint64(be))
	case Float32:
		f := math.Float32frombits(binary.BigEndian.Uint32(be))
		v, _ := strconv.ParseFloat(strconv.FormatFloat(float64(f), 'g', -1, 32), 64)
		return packet.Float(v, -1)
	case Float64:
		return packet.Float(math.Float64frombits(binary.BigEndian.Uint64(be)), -1)
	}
	panic("type")
}

func same(a, b packet.Value) bool {
	if a.Kind() != b.Kind() {
		return false
	}
	fa, _ := a.Float64()
	fb, _ := b.Float64()
	if math.IsNaN(fa) && math.IsNaN(fb) {
		return true
	}
	return a.String() == b.String()
}

var numeric = []Type{Int16, Uint16, Int32, Uint32, Int64, Uint64, Float32, Float64}
var orders = []Order{ABCD, CDAB, BADC, DCBA}

func checkDecode(t *testing.T, typ Type, o Order, be []byte) {
	t.Helper()
	r := Register{Name: "x", Area: Holding, Type: typ, Order: o}
	got := r.Decode(toWire(be, o))
	if want := expect(typ, be); !same(got, want) {
		t.Fatalf("%s %s from big-endian % x: got %v (%v), want %v (%v)", typ, o, be, got, got.Kind(), want, want.Kind())
	}
}

func TestDecodeEveryTypeAndOrder(t *testing.T) {
	rng := rand.New(rand.NewPCG(3, 4))
	fixedCases := [][]byte{
		{0x00, 0x00, 0x00, 0x00, 0x00, 0x00, 0x00, 0x00},
		{0xFF, 0xFF, 0xFF, 0xFF, 0xFF, 0xFF, 0xFF, 0xFF},
		{0x80, 0x00, 0x00, 0x00, 0x00, 0x00, 0x00, 0x00},
		{0x41, 0xCA, 0x66, 0x66, 0x12, 0x34, 0x56, 0x78}, // 25.3 as float32
		{0x01, 0x02, 0x03, 0x04, 0x05, 0x06, 0x07, 0x08},
	}
	for _, typ := range numeric {
		n := 2 * typ.Words()
		for _, o := range orders {
			for _, c := range fixedCases {
				checkDecode(t, typ, o, c[:n])
			}
			for range 200 {
				be := make([]byte, n)
				for i := range be {
					be[i] = byte(rng.Uint32())
				}
				checkDecode(t, typ, o, be)
			}
		}
	}
	// The classic: 25.3 as float32 in CDAB is 0x6666 0x41CA on the wire.
	r := Register{Type: Float32, Order: CDAB}
	if got := r.Decode([]byte{0x66, 0x66, 0x41, 0xCA}).String(); got != "25.3" {
		t.Fatalf("CDAB float32 25.3 decoded as %s", got)
	}
}

func FuzzDecode(f *testing.F) {
	f.Add(uint8(6), uint8(1), []byte{0x66, 0x66, 0x41, 0xCA, 0, 0, 0, 0})
	f.Fuzz(func(t *testing.T, ti, oi uint8, raw []byte) {
		typ := numeric[int(ti)%len(numeric)]
		o := orders[int(oi)%len(orders)]
		n := 2 * typ.Words()
		if len(raw) < n {
			return
		}
		checkDecode(t, typ, o, raw[:n])
	})
}

func TestScaleOffsetPrecision(t *testing.T) {
	scale, scale2, prec := 0.1, 0.25, 3
	for _, tc := range []struct {
		r    Register
		wire []byte
		want string
	}{
		{Register{Type: Int16, Scale: &scale}, []byte{0xFF, 0x9C}, "-10.0"},  // -100 × 0.1
		{Register{Type: Uint16, Scale: &scale}, []byte{0x00, 0xFD}, "25.3"},  // 253 × 0.1
		{Register{Type: Uint16, Scale: &scale2}, []byte{0x00, 0x05}, "1.25"}, // default precision from the scale
		{Register{Type: Uint16, Offset: -40}, []byte{0x00, 0x41}, "25"},      // 65 − 40
		{Register{Type: Uint16, Scale: &scale, Precision: &prec}, []byte{0x00, 0x01}, "0.100"},
		{Register{Type: Uint64}, []byte{0xFF, 0xFF, 0xFF, 0xFF, 0xFF, 0xFF, 0xFF, 0xFF}, "18446744073709551615"}, // exact, no float
	} {
		if got := tc.r.Decode(tc.wire).String(); got != tc.want {
			t.Errorf("%+v % x: got %s, want %s", tc.r, tc.wire, got, tc.want)
		}
	}
}

func TestBoolsAndStrings(t *testing.T) {
	bit := uint8(9)
	r := Register{Type: Bool, Bit: &bit}
	if r.Decode([]byte{0x02, 0x00}).String() != "True" || r.Decode([]byte{0xFD, 0xFF}).String() != "False" {
		t.Fatal("bit 9")
	}
	s := Register{Type: String, Length: 3}
	if got := s.Decode([]byte("AB-C\x00\x00")).String(); got != "AB-C" {
		t.Fatalf("string %q", got)
	}
	s.Order = BADC
	if got := s.Decode([]byte("BADC\x00E")).String(); got != "ABCDE" {
		t.Fatalf("byte-swapped string %q", got)
	}
}

// Encode is Decode's inverse, so the emulator serves what a gateway reads.
func TestEncodeRoundTrip(t *testing.T) {
	scale := 0.01
	for _, typ := range numeric {
		for _, o := range orders {
			for _, v := range []float64{0, 1, 12.34, 250, -7} {
				r := Register{Type: typ, Order: o, Scale: &scale}
				if (typ == Uint16 || typ == Uint32 || typ == Uint64) && v < 0 {
					continue
				}
				buf := make([]byte, 2*typ.Words())
				r.Encode(buf, v)
				got, _ := r.Decode(buf).Float64()
				if math.Abs(got-v) > 0.006 {
					t.Errorf("%s %s: encode %v, decode %v", typ, o, v, got)
				}
			}
		}
	}
}

// Any bytes as a firmware profile: an error or a valid profile whose every
// register decodes its own encoding without panicking.
func FuzzParse(f *testing.F) {
	f.Add([]byte("model: m\ndata_type: D\nregisters:\n  - {name: A, area: holding, address: 0, type: float32, order: CDAB, scale: 0.1}\n"))
	f.Add([]byte("model: m\ndata_type: D\nline:\n  regex: '^(?P<a>[0-9]+)$'\n  fields: [{name: A, group: a}]\n"))
	f.Fuzz(func(t *testing.T, data []byte) {
		p, err := Parse("fuzz", "fuzz.yaml", data)
		if err != nil {
			return
		}
		for i := range p.Registers {
			r := &p.Registers[i]
			if r.Area.IsBit() {
				continue
			}
			buf := make([]byte, 2*r.Words())
			r.Encode(buf, 1)
			_ = r.Decode(buf)
		}
	})
}
