package config

import (
	"embed"
	"fmt"
	"strings"
)

//go:embed starter/*.yaml
var starters embed.FS

// StarterKinds are the kinds of site Starter knows.
var StarterKinds = []string{"farm", "mine"}

// StarterVars are what a starter site file leaves to its site: the RS-485
// port of its first line, the MQTT broker, the buffer file and the status
// page's listener. Zero fields take the packaged gateway's defaults.
type StarterVars struct {
	Port, Broker, Buffer, Listen string
}

// Starter returns a commented starter site file for a farm or a mine, with
// the sensors such a site typically has, that gateway check passes without
// a warning and gateway run runs.
func Starter(kind string, v StarterVars) ([]byte, error) {
	b, err := starters.ReadFile("starter/" + kind + ".yaml")
	if err != nil {
		return nil, fmt.Errorf("config: no starter for kind %q (valid: farm, mine)", kind)
	}
	or := func(s, def string) string {
		if s == "" {
			return def
		}
		return s
	}
	return []byte(strings.NewReplacer(
		"{{PORT}}", or(v.Port, "/dev/ttyUSB0"),
		"{{BROKER}}", or(v.Broker, "mqtt://127.0.0.1:1883"),
		"{{BUFFER}}", or(v.Buffer, DefaultBufferPath),
		"{{LISTEN}}", or(v.Listen, DefaultMetricsListen),
	).Replace(string(b))), nil
}
