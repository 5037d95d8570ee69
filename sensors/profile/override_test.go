package profile

import "testing"

func TestWithOverrides(t *testing.T) {
	p, err := Parse("t", "t.yaml", []byte(`model: T
data_type: Soil
registers:
  - {name: Temp, area: holding, address: 0, type: int16, scale: 0.1, alarm: {above: 50}}
  - {name: Moist, area: holding, address: 1, scale: 0.1}
`))
	if err != nil {
		t.Fatal(err)
	}
	scale, off, above := 0.01, 2.0, 40.0
	q, err := p.WithOverrides([]Override{
		{Point: "Moist", Name: "Moisture", Scale: &scale},
		{Point: "Temp", Offset: &off, Alarm: &Alarm{Above: &above}},
	})
	if err != nil {
		t.Fatal(err)
	}
	if r := q.Registers[1]; r.Name != "Moisture" || r.ScaleOr1() != 0.01 {
		t.Errorf("Moist = %+v", r)
	}
	if r := q.Registers[0]; r.Offset != 2 || *r.Alarm.Above != 40 || r.ScaleOr1() != 0.1 {
		t.Errorf("Temp = %+v", r)
	}
	// Decoding follows: raw 250 with scale 0.1 and offset 2 is 27.
	if v := q.Registers[0].Decode([]byte{0, 250}); v.String() != "27.0" {
		t.Errorf("decoded %s, want 27.0", v)
	}
	if r := p.Registers[0]; r.Offset != 0 || *r.Alarm.Above != 50 || p.Registers[1].Name != "Moist" {
		t.Errorf("the profile changed: %+v", p.Registers)
	}
	if _, err := p.WithOverrides([]Override{{Point: "Nope"}}); err == nil {
		t.Error("an unknown point must be an error")
	}
}
