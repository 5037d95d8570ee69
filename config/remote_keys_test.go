package config_test

import (
	"path/filepath"
	"strings"
	"testing"

	"fieldlink/config"
	"fieldlink/internal/yamlconf"
)

// A remote configuration whose trust keys cannot be read stops the start
// (and a check) with the field and what to give: unsigned configuration
// is never accepted (docs/startup.md, "Remote configuration keys").
func TestRemoteConfigKeysUnreadableAtStart(t *testing.T) {
	src := downlinkSite + "remote_config: {url: \"https://config.example/gw-01.json\", keys: [nowhere.pub]}\n"
	file := filepath.Join(t.TempDir(), "site.yaml")
	_, err := config.Parse(file, []byte(src), embedded)
	es, ok := yamlconf.IsErrors(err)
	if !ok {
		t.Fatalf("want positioned errors, got %v", err)
	}
	for _, e := range es {
		if e.Field == "remote_config.keys[0]" && strings.Contains(e.Msg, "gateway keygen") && strings.HasPrefix(e.Error(), file+":") {
			return
		}
	}
	t.Fatalf("no error at remote_config.keys[0] naming gateway keygen: %v", err)
}
