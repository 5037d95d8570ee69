package config

import (
	"strings"
	"testing"
)

const pointsSite = `site: {id: "001"}
gateway: {id: gw-01}
buses:
  - name: field-a
    url: rtu:///dev/ttyUSB0?baud=4800
    devices:
      - name: anemometer-1
        profile: wind
        slave: 1
        points:
          - point: WindSpeed
            name: Wind
            scale: 0.01
            offset: -1
            alarm: {above: 20}
      - {name: anemometer-2, profile: wind, slave: 2}
`

func TestPointOverrides(t *testing.T) {
	c, err := Parse("site.yaml", []byte(pointsSite), testProfiles)
	if err != nil {
		t.Fatal(err)
	}
	d := &c.Buses[0].Devices[0]
	p := c.DeviceProfile(d)
	r := &p.Registers[0]
	if r.Name != "Wind" || r.ScaleOr1() != 0.01 || r.Offset != -1 || r.Alarm == nil || *r.Alarm.Above != 20 {
		t.Errorf("overridden register = %+v", r)
	}
	if d.Points[0].Line != 11 {
		t.Errorf("override's line = %d, want 11", d.Points[0].Line)
	}
	// The profile itself, and the other device using it, are unchanged.
	base := c.Profiles["wind"].Registers[0]
	if base.Name != "WindSpeed" || base.ScaleOr1() != 0.1 || base.Alarm != nil {
		t.Errorf("profile changed: %+v", base)
	}
	if c.DeviceProfile(&c.Buses[0].Devices[1]) != c.Profiles["wind"] {
		t.Error("a device without points does not poll with its profile")
	}
}

func TestPointOverrideErrors(t *testing.T) {
	for _, tc := range []struct {
		old, new string
		want     string
	}{
		{"point: WindSpeed", "point: WindSped", `site.yaml:11:20: buses[0].devices[0].points[0].point: profile wind has no point "WindSped" (did you mean "WindSpeed"?) (its points: WindSpeed)`},
		{"scale: 0.01", "scale: 0", `site.yaml:13:20: buses[0].devices[0].points[0].scale: must be a non-zero finite number`},
		{"alarm: {above: 20}", "alarm: {above: 20, below: 30}", `buses[0].devices[0].points[0].alarm.below: must be less than above (20), got 30`},
		{"alarm: {above: 20}", "alarm: {}", `buses[0].devices[0].points[0].alarm: give above, below or both`},
		{"name: Wind", "name: ''", `buses[0].devices[0].points[0].name: must not be empty`},
		{"offset: -1", "offset: -1\n          - point: WindSpeed", `buses[0].devices[0].points[1].point: point "WindSpeed" is already changed by points[0]`},
		{"offset: -1", "offset: -1\n            colour: red", `buses[0].devices[0].points[0].colour: unknown field "colour" (valid: point, name, scale, offset, alarm, deadband, deadband_percent, heartbeat)`},
		{"        points:", "        writable: [{point: WindSpeed}]\n        points:", `point "WindSpeed" is writable on this device`},
		{"      - {name: anemometer-2, profile: wind, slave: 2}", "      - name: anemometer-2\n        profile: wind\n        slave: 2\n        writable: [{point: WindSpeed, interlock: [{device: anemometer-1, point: WindSpeed, below: 30}]}]",
			`points[0].name: point "WindSpeed" keeps its name: the interlock of anemometer-2.WindSpeed reads it`},
	} {
		src := strings.Replace(pointsSite, tc.old, tc.new, 1)
		_, err := Parse("site.yaml", []byte(src), testProfiles)
		if err == nil || !strings.Contains(err.Error(), tc.want) {
			t.Errorf("%s → %s: got %v\nwant %s", tc.old, tc.new, err, tc.want)
		}
	}
}
