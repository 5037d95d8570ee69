package config

import (
	"os"

	"fieldlink/packet"
)

// Site names the farm or mine.
type Site struct {
	ID string `yaml:"id,required"`
	// IDField is the DataHead key that carries ID: FarmId (default) or MineId.
	IDField string `yaml:"id_field"`
	// Timezone for the packet's Date and Time (IANA name); default UTC.
	Timezone string `yaml:"timezone"`
}

// Gateway identifies this gateway among the site's.
type Gateway struct {
	ID string `yaml:"id,required"`
}

// Packet shapes the JSON packets.
type Packet struct {
	// Values: strings (default, as the platforms expect: "Rainfall":"0")
	// or number.
	Values packet.ValueStyle `yaml:"values"`
}

// zoneinfoDir is where the field binary finds time zones (it carries none
// of its own); tests point it elsewhere.
var zoneinfoDir = "/usr/share/zoneinfo"

// zoneHint says what to do about a time zone that does not load: name it
// right, or give the system its time zone database.
func zoneHint() string {
	if _, err := os.Stat(zoneinfoDir); err != nil && os.Getenv("ZONEINFO") == "" {
		return "this system has no time zone database (" + zoneinfoDir + "): install the tzdata package, or set ZONEINFO to a zoneinfo.zip"
	}
	return "use an IANA name such as Asia/Shanghai or UTC"
}
