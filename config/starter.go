package config

import (
	"embed"
	"fmt"
)

//go:embed starter/*.yaml
var starters embed.FS

// StarterKinds are the kinds of site Starter knows.
var StarterKinds = []string{"farm", "mine"}

// Starter returns a commented starter site file for a farm or a mine, with
// the sensors such a site typically has.
func Starter(kind string) ([]byte, error) {
	b, err := starters.ReadFile("starter/" + kind + ".yaml")
	if err != nil {
		return nil, fmt.Errorf("config: no starter for kind %q (valid: farm, mine)", kind)
	}
	return b, nil
}
