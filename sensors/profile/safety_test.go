package profile

import (
	"os"
	"path/filepath"
	"regexp"
	"strings"
	"testing"

	firmwareprofiles "fieldlink/firmware-profiles"
)

// breakerCopy writes the shipped methane breaker profile to dir as name,
// with old replaced by new.
func breakerCopy(t *testing.T, dir, name, old, new string) string {
	t.Helper()
	b, err := firmwareprofiles.FS.ReadFile("generic-mine-methane-breaker.yaml")
	if err != nil {
		t.Fatal(err)
	}
	src := string(b)
	if !strings.Contains(src, old) {
		t.Fatalf("the shipped profile has no %q", old)
	}
	file := filepath.Join(dir, name)
	if err := os.WriteFile(file, []byte(strings.Replace(src, old, new, 1)), 0o644); err != nil {
		t.Fatal(err)
	}
	return file
}

// Safety is a property of the shipped profile: a profile in profiles_dir
// that overrides it (by its name, or as the same model under another
// name) and drops safety from a safety register is refused, with the
// file, the line and the field.
func TestOverrideKeepsSafety(t *testing.T) {
	const relay = "    address: 0\n    safety: true\n"
	for _, tc := range []struct{ name, file, old, new string }{
		{"write instead of safety", "generic-mine-methane-breaker.yaml", relay, "    address: 0\n    write: {function: 5}\n"},
		{"safety: false", "generic-mine-methane-breaker.yaml", relay, "    address: 0\n    safety: false\n"},
		{"the same model under another name", "my-breaker.yaml", relay, "    address: 0\n    write: {function: 5}\n"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			dir := t.TempDir()
			file := breakerCopy(t, dir, tc.file, tc.old, tc.new)
			set, err := Load(firmwareprofiles.FS, dir)
			// CutOffRelay is written on lines 39 to 42.
			at := regexp.MustCompile(regexp.QuoteMeta(file) + `:(39|4[0-2])\b`)
			if err == nil || !at.MatchString(err.Error()) || !strings.Contains(err.Error(), "registers[2].safety") || !strings.Contains(err.Error(), "CutOffRelay") {
				t.Fatalf("an override dropping safety from CutOffRelay: %v; want an error at %s:39..42 naming registers[2].safety", err, file)
			}
			for name, p := range set {
				for _, r := range p.Registers {
					if r.Name == "CutOffRelay" && r.Writable() {
						t.Errorf("profile %s: CutOffRelay is writable", name)
					}
				}
			}
		})
	}
	// An override that keeps safety, and changes something else, loads.
	dir := t.TempDir()
	breakerCopy(t, dir, "generic-mine-methane-breaker.yaml", "interval: 5s", "interval: 10s")
	if _, err := Load(firmwareprofiles.FS, dir); err != nil {
		t.Errorf("an override keeping safety: %v", err)
	}
}
