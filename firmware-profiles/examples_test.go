package firmwareprofiles_test

import (
	"encoding/hex"
	"testing"
)

// The worked examples of the manuals each profile follows: these bytes on
// the wire must read as the value the manual gives. They catch a wrong
// type, scale, sign or byte order, which a round trip cannot.
func TestManualExamples(t *testing.T) {
	set := load(t)
	tests := []struct {
		profile, register string
		wire              string // hex, as the device sends it
		want              string // as the packet shows it
	}{
		// GMP252 user guide A.3: registers D47A 43E8 = 43E8D47A = 465.65997 ppm.
		{"vaisala-gmp252", "CO2", "d47a43e8", "466"},
		// JXBS-3001-CO: 0x00BD = 189 -> 18.9 ppm.
		{"jxct-jxbs-3001-co", "CO", "00bd", "18.9"},
		// DFRobot SEN0482: 0x028F = 655 -> 65.5 degrees.
		{"dfrobot-sen0482", "WindDirection", "028f", "65.5"},
		// DFRobot SEN0483 (generic layout): 0x0025 = 37 -> 3.7 m/s.
		{"generic-wind-speed", "WindSpeed", "0025", "3.7"},
		// XM9505: 0x0218 = 536 counts -> 53.6 mm.
		{"xunchip-xm9505", "Rainfall", "0218", "53.6"},
		// SenseCAP soil: 0x0702 -> 17.94 °C; 0xFF05 -> -2.51 °C; 0x071D -> 18.21 %.
		{"sensecap-s-soil-mtec-02", "SoilTemperature", "0702", "17.94"},
		{"sensecap-s-soil-mtec-02", "SoilTemperature", "ff05", "-2.51"},
		{"sensecap-s-soil-mtec-02", "SoilMoisture", "071d", "18.21"},
		// JXBS-3001-TR: pH raw 308 -> 3.08; the family example 65.8 %, -10.1 °C.
		{"jxct-jxbs-3001-tr", "SoilPH", "0134", "3.08"},
		{"jxct-jxbs-3001-tr", "SoilMoisture", "0292", "65.8"},
		{"jxct-jxbs-3001-tr", "SoilTemperature", "ff9b", "-10.1"},
		// Renke RS-WS-N01: 0x0292 -> 65.8 %RH, 0xFF9B -> -10.1 °C.
		{"renke-rs-ws-n01", "Humidity", "0292", "65.8"},
		{"renke-rs-ws-n01", "Temperature", "ff9b", "-10.1"},
		// Thies WSC11 table 6: 101 = 10.1 m/s, 255 = 25.5 °C, 105000 = 1050.00 hPa.
		{"thies-wsc11", "WindSpeed", "00000065", "10.1"},
		{"thies-wsc11", "Temperature", "000000ff", "25.5"},
		{"thies-wsc11", "Temperature", "ffffff9b", "-10.1"},
		{"thies-wsc11", "Pressure", "00019a28", "1050.00"},
		// ELT MB-350U-C 2.1: 800 -> 800 ppm, 255 -> 25.5 °C, 75 -> 75 %, 25 -> 25 ppm.
		{"elt-mb-350u-c", "CO2", "0320", "800"},
		{"elt-mb-350u-c", "Temperature", "00ff", "25.5"},
		{"elt-mb-350u-c", "Humidity", "004b", "75"},
		{"elt-mb-350u-c", "CO", "0019", "25"},
		// Renke RS-FXJT-N01: degrees as a plain word.
		{"renke-rs-fxjt-n01", "WindDirection", "010e", "270"},
		// DFRobot SEN0644: high word first; 0x0001 0x86A0 = 100000 lux.
		{"dfrobot-sen0644", "Light", "000186a0", "100000"},
	}
	for _, tt := range tests {
		p, ok := set[tt.profile]
		if !ok {
			t.Errorf("no profile %s", tt.profile)
			continue
		}
		r, ok := p.Register(tt.register)
		if !ok {
			t.Errorf("%s: no register %s", tt.profile, tt.register)
			continue
		}
		b, err := hex.DecodeString(tt.wire)
		if err != nil || len(b) != 2*r.Words() {
			t.Fatalf("%s %s: test wire %q does not fit %d registers", tt.profile, tt.register, tt.wire, r.Words())
		}
		if got := r.Decode(b).String(); got != tt.want {
			t.Errorf("%s: %s from %s = %s, want %s", tt.profile, tt.register, tt.wire, got, tt.want)
		}
	}
}
