package profile_test

import (
	"fmt"

	"fieldlink/sensors/profile"
)

// A profile is parsed (and validated) once; decoding a register's raw
// words then cannot fail. Here a methane sensor's holding register 0
// holds 0.01 %VOL: 125 on the wire is 1.25 %VOL, over its alarm.
func ExampleParse() {
	p, err := profile.Parse("my-methane", "my-methane.yaml", []byte(`
model: a mine methane sensor
data_type: Gas
registers:
  - {name: CH4, area: holding, address: 0, type: uint16, scale: 0.01, unit: "%VOL", precision: 2, alarm: {above: 1.0}}
`))
	if err != nil {
		fmt.Println(err)
		return
	}
	ch4, _ := p.Register("CH4")
	v := ch4.Decode([]byte{0x00, 0x7d}) // the register's two bytes, as the device sends them
	text, _ := v.AppendText(nil)
	fmt.Println(p.DataType, ch4.Name, string(text), ch4.Unit, "alarm:", ch4.Alarmed(v))
	// Output:
	// Gas CH4 1.25 %VOL alarm: true
}
