package downlink

import (
	"context"
	"errors"
	"fmt"
	"math"
	"math/big"
	"math/rand/v2"
	"strconv"
	"strings"
	"testing"
	"testing/fstest"
	"time"

	"fieldlink/config"
	"fieldlink/packet"
	"fieldlink/sensors/profile"
)

// More values at the limits, through the engine as a command sends them:
// int64 and uint64 at their extremes and at the edge of float64's
// integers, many fraction digits, exponents that move the point, and
// floats at their smallest and largest.
func TestEngineValuesExactAtTheEdges(t *testing.T) {
	for _, tc := range []struct {
		point, value string
		ok           bool
	}{
		{"I64", "-9223372036854775808", false}, {"I64", "-9.223372036854775808e18", false}, {"I64", "9223372036854775808", false},
		{"I64", "9223372036854775806", false}, {"I64", "-9223372036854775807", false}, {"I64", "-9007199254740992e0", true},
		{"I64", "90071992547409.92e2", true}, {"I64", "9007199254740991.5", false}, {"I64", "9007199254740994", false}, {"I64", "-9223372036854775808.000000000000000000000000000000000000001", false},
		{"I64", "-9223372036854775809e0", false}, {"I64", "1e1000", false}, {"I64", "9007199254740993e-1", false},
		{"U64", "18446744073709549568", false}, {"U64", "9.007199254740992e15", true}, {"U64", "18446744073709549569", false},
		{"U64", "18446744073709551616e-1", false}, {"U64", "-0.0", true}, {"U64", "0e-7", true}, {"U64", "-1e-1000", false},
		{"I16", "32767.00000000000000000000000000000000000000000000000000000000", true},
		{"I16", "1.000000000000000000000000000000000000000000000000000000000001", false},
		{"I16", "3.2767e4", true}, {"I16", "327.67e2", true}, {"I16", "3276700e-2", true}, {"I16", "32767000000000000000000000000000e-27", true},
		{"I16", "32767000000000000000000000000001e-27", false}, {"I16", "100000000000000000000e-20", true}, {"I16", "1e-1000", false},
		{"I16", "0e1001", false}, {"I16", "1E1", true}, {"I16", "1e+1", true},
		{"U32", "4294967295.0000000000000000000000000000000000000000000000000000", true}, {"U32", "42949672950e-1", true},
		{"Set", "3276.7000000000000000000000000000000000000000000000000000000000", true}, {"Set", "0.51e1", true}, {"Set", "51e-1", true},
		{"Set", "5.1000000000000000000000000000000000000000000000000000000000001", false}, {"Set", "-32768e-1", true},
		{"Off", "32727.50", true}, {"Off", "3.27275e4", true}, {"Off", "-40.0000000000000000000000000000000000000000000000000000000001", false},
		{"F64", "4.9406564584124654e-324", true}, {"F64", "5e-324", false}, {"F64", "2.2250738585072014e-308", true}, {"F64", "-1.7976931348623157e308", true},
		{"F64", "0.1000000000000000055511151231257827021181583404541015625", true}, {"F64", "1e-1000", false},
		{"F32", "16777217", true}, {"F32", "1.1754943508222875e-38", true}, {"F32", "1.4e-45", false}, {"F32", "3.4028235e38", false},
		{"F32Step", "0.50000000000000000000000000000000000000000000000000000000000", true}, {"F32Step", "5e-1", true}, {"F32Step", "25e-2", false},
		{"F32Step", "-0.5", false}, {"F32Step", "1e20", true}, {"F32Step", "1.0000000000000000000000000000000000000000000000000000000000005", false},
	} {
		t.Run(tc.point+"="+tc.value, func(t *testing.T) {
			e, site, _ := limitsEngine(t)
			cmd := fmt.Sprintf(`{"id":"x","device":"d","point":%q,"value":%s,"issued_at":%q}`, tc.point, tc.value, e0.Format(time.RFC3339))
			res := e.Handle(context.Background(), []byte(cmd))
			if got := res.Status == StatusDone && len(site.writes) == 1; got != tc.ok {
				t.Fatalf("%s = %s: %s %q, writes %v; want written: %v", tc.point, tc.value, res.Status, res.Reason, site.writes, tc.ok)
			}
			if !tc.ok && len(site.writes) != 0 {
				t.Fatalf("%s = %s: refused after the wire: %v", tc.point, tc.value, site.writes)
			}
		})
	}
}

// The messages name the raw value as an exact integer and the type's
// range, and the step's base as written.
func TestExactSaysWhy(t *testing.T) {
	points := exactPoints(t)
	for _, tc := range []struct{ point, value, want string }{
		{"I64", "1e25", "1e25 is raw 10000000000000000000000000, outside int64 (-9223372036854775808..9223372036854775807)"},
		{"U16", "-1", "-1 is raw -1, outside uint16 (0..65535)"},
		{"I64", "9007199254740993", "9007199254740993 is raw 9007199254740993, which the bus cannot carry exactly (it would write 9007199254740992)"},
		{"Set", "5.15", "5.15 is raw 51.5, not a whole number"},
		{"F32", "1e-50", "1e-50 is raw 1e-50, which a float32 cannot hold to its precision"},
		{"F32Step", "0.75", "0.75 is not 0 plus a whole number of steps of 0.5"},
		{"Stepped", "1", "1 is not -10.5 plus a whole number of steps of 0.75"},
		{"I16", "1e1001", "1e1001 is out of range"},
	} {
		p := points[tc.point]
		f, _ := strconv.ParseFloat(tc.value, 64)
		if err := p.exact(tc.value, f); err == nil || !strings.Contains(err.Error(), tc.want) {
			t.Errorf("%s = %s: %v; want %q", tc.point, tc.value, err, tc.want)
		}
	}
}

// The exact check decides as the big.Rat one it replaced (ratExact, below)
// on every value: random digits at every type's limits, with fractions,
// exponents and the points' scales, offsets and steps.
func TestExactAgreesWithRationals(t *testing.T) {
	points := exactPoints(t)
	rng := rand.New(rand.NewPCG(1, 2))
	var accepted, refused int
	for range 8000 {
		name := exactNames[rng.IntN(len(exactNames))]
		text := randomValue(rng)
		if ok := agree(t, points[name], name, text); ok {
			accepted++
		} else {
			refused++
		}
	}
	t.Logf("%d accepted, %d refused, both checks agreeing", accepted, refused)
	if accepted < 500 || refused < 500 {
		t.Fatalf("%d accepted, %d refused: the values do not reach both sides of the limits", accepted, refused)
	}
}

func FuzzExact(f *testing.F) {
	for _, s := range []string{"32767", "-9223372036854775808", "18446744073709549568", "1e-320", "5.15", "0.1", "1.5e9", "3.4028235e38"} {
		f.Add(s, uint8(0))
	}
	points := exactPoints(f)
	f.Fuzz(func(t *testing.T, text string, which uint8) {
		if _, err := parseValue([]byte(text)); err != nil {
			return // the command refuses it before the check
		}
		name := exactNames[int(which)%len(exactNames)]
		agree(t, points[name], name, text)
	})
}

var exactNames = []string{"I16", "U16", "I32", "U32", "I64", "U64", "F32", "F32Step", "F64", "Set", "Off", "Stepped", "Third"}

// exactPoints are the limits profile's number points, and two more: an
// offset with a step from a min, and a scale that is no binary or decimal
// fraction's inverse.
func exactPoints(t testing.TB) map[string]*point {
	t.Helper()
	set, err := profile.Load(fstest.MapFS{"limits.yaml": {Data: []byte(limitsProfile + `  - {name: Stepped, area: holding, address: 25, type: int32, scale: 0.25, offset: 1.5, write: {}}
  - {name: Third, area: holding, address: 27, type: uint32, scale: 0.3333333333333333, write: {}}
`)}}, "")
	if err != nil {
		t.Fatal(err)
	}
	f := func(v float64) *float64 { return &v }
	rules := map[string]config.Writable{"F32Step": {Min: f(0), Step: 0.5}, "Stepped": {Min: f(-10.5), Max: f(1e6), Step: 0.75}}
	points := map[string]*point{}
	for _, name := range exactNames {
		reg, ok := set["limits"].Register(name)
		if !ok {
			t.Fatalf("no register %s", name)
		}
		points[name] = &point{device: "d", reg: reg, rule: rules[name]}
	}
	return points
}

// agree fails t unless exact and ratExact both take text or both refuse it.
func agree(t *testing.T, p *point, name, text string) bool {
	t.Helper()
	f, err := strconv.ParseFloat(text, 64)
	if err != nil || math.IsInf(f, 0) {
		return false
	}
	got, want := p.exact(text, f), ratExact(p, text, f)
	if (got == nil) != (want == nil) {
		t.Fatalf("%s = %s: exact says %v, the rationals %v", name, text, got, want)
	}
	return got == nil
}

// randomValue is a number's text near a type's limit or a scale's step:
// a limit or a small number, nudged, its digits moved by an exponent, up
// to 64 characters.
func randomValue(rng *rand.Rand) string {
	bases := []string{"0", "1", "5", "51", "32767", "32768", "65535", "2147483647", "4294967295", "9007199254740992", "9007199254740993",
		"9223372036854775807", "9223372036854775808", "18446744073709549568", "18446744073709551615", "33554431", "16777217",
		"340282346638528859811704183484516925440", "17976931348623157", "22250738585072014", "49406564584124654", "1401298464324817"}
	digits := []byte(bases[rng.IntN(len(bases))])
	switch rng.IntN(4) {
	case 0: // nudge the last digit
		digits[len(digits)-1] = byte('0' + rng.IntN(10))
	case 1: // trailing digits
		for range rng.IntN(20) {
			digits = append(digits, byte('0'+rng.IntN(10)))
		}
	case 2: // trailing zeros
		digits = append(digits, strings.Repeat("0", rng.IntN(30))...)
	}
	text := string(digits)
	if n := rng.IntN(len(text) + 3); n < len(text) && rng.IntN(2) == 0 { // a point
		text = text[:n] + "." + text[n:]
		if n == 0 {
			text = "0" + text
		}
	}
	if rng.IntN(2) == 0 {
		text += "e" + strconv.Itoa(rng.IntN(80)-40)
	}
	if rng.IntN(3) == 0 {
		text = "-" + text
	}
	if len(text) > maxValueLength {
		text = text[:maxValueLength]
		text = strings.TrimRight(text, ".e-")
	}
	if _, err := parseValue([]byte(text)); err != nil {
		return "1"
	}
	return text
}

// ratExact is the exact check as it was, on math/big's rationals: the
// reference the decimal one must agree with.
func ratExact(p *point, text string, f float64) error {
	if i := strings.IndexAny(text, "eE"); i >= 0 {
		exp, err := strconv.Atoi(strings.TrimPrefix(text[i+1:], "+"))
		if err != nil || exp > maxExponent || exp < -maxExponent {
			return fmt.Errorf("%s is out of range", text)
		}
	}
	v, ok := new(big.Rat).SetString(text)
	if !ok {
		return fmt.Errorf("%q is not a number", text)
	}
	setting := func(f float64) *big.Rat {
		r, _ := new(big.Rat).SetString(strconv.FormatFloat(f, 'g', -1, 64))
		return r
	}
	r := p.rule
	if r.Min != nil && v.Cmp(setting(*r.Min)) < 0 {
		return errors.New("below min")
	}
	if r.Max != nil && v.Cmp(setting(*r.Max)) > 0 {
		return errors.New("above max")
	}
	if r.Step > 0 {
		base := new(big.Rat)
		if r.Min != nil {
			base = setting(*r.Min)
		}
		n := new(big.Rat).Sub(v, base)
		if !n.Quo(n, setting(r.Step)).IsInt() {
			return errors.New("off step")
		}
	}
	reg := p.reg
	raw := new(big.Rat).Sub(v, setting(reg.Offset))
	raw.Quo(raw, setting(reg.ScaleOr1()))
	var lo, hi *big.Int
	isInt := true
	switch reg.Type {
	case profile.Int16:
		lo, hi = big.NewInt(math.MinInt16), big.NewInt(math.MaxInt16)
	case profile.Uint16:
		lo, hi = big.NewInt(0), big.NewInt(math.MaxUint16)
	case profile.Int32:
		lo, hi = big.NewInt(math.MinInt32), big.NewInt(math.MaxInt32)
	case profile.Uint32:
		lo, hi = big.NewInt(0), big.NewInt(math.MaxUint32)
	case profile.Int64:
		lo, hi = big.NewInt(math.MinInt64), big.NewInt(math.MaxInt64)
	case profile.Uint64:
		lo, hi = big.NewInt(0), new(big.Int).SetUint64(math.MaxUint64)
	default:
		isInt = false
	}
	if isInt && (!raw.IsInt() || raw.Num().Cmp(lo) < 0 || raw.Num().Cmp(hi) > 0) {
		return errors.New("not a whole number in range")
	}
	i, u, fl, kind, err := onTheWire(reg, f)
	if err != nil {
		return err
	}
	if isInt {
		n := big.NewInt(i)
		if kind == packet.KindUint {
			n = new(big.Int).SetUint64(u)
		}
		if n.Cmp(raw.Num()) != 0 {
			return errors.New("not carried")
		}
		return nil
	}
	tol := big.NewRat(1, 1<<50)
	if reg.Type == profile.Float32 {
		tol = big.NewRat(1, 1<<23)
	}
	diff := new(big.Rat).Sub(new(big.Rat).SetFloat64(fl), raw)
	if diff.Abs(diff).Cmp(new(big.Rat).Mul(new(big.Rat).Abs(raw), tol)) > 0 {
		return errors.New("not held")
	}
	return nil
}
