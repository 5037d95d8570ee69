// Package firmwareprofiles embeds the register maps of the sensor models the
// gateway knows out of the box, one YAML file per model. See the README's
// "Firmware profiles" section for the format.
package firmwareprofiles

import "embed"

// FS holds every *.yaml profile of this directory.
//
//go:embed *.yaml
var FS embed.FS
