package fieldlink_test

import (
	"bufio"
	"bytes"
	"os"
	"os/exec"
	"path"
	"regexp"
	"sort"
	"strings"
	"testing"
)

// layers are the module's packages from the bottom up, as docs/architecture.md
// lays them out. A package may import its own layer and those below it, never
// one above: that keeps the leaves leaves and the composition root at the top.
// A pattern is a package's path in the module, or a folder and every package
// under it ("uplink/...").
var layers = []struct {
	name     string
	packages []string
}{
	{"leaves", []string{
		"internal/atomicfile", "internal/journal", "internal/jsonkind", "internal/kclock",
		"internal/sdnotify", "internal/signing", "internal/words", "internal/yamlconf", "internal/serialline",
		"packet", "metrics", "sensors/modbus", "sensors/modbus/spec", "sparkplug", "selector/cuckoo", "selector/lstm",
		"firmware-profiles", "docs/schema",
	}},
	{"readings, the store and the pick", []string{
		"sensors", "sensors/...", "buffer", "buffer/...", "selector", "selector/...",
	}},
	{"upstreams", []string{"uplink", "uplink/..."}},
	{"the site file", []string{"config"}},
	{"features over the site file", []string{"downlink", "exception", "fleet", "updategate", "status"}},
	{"the composition root", []string{"agent"}},
	{"front ends over the root", []string{"commission", "demo"}},
	{"binaries", []string{"cmd/..."}},
}

// testSupport is what only tests and test rigs import; no package of a layer
// may import it.
var testSupport = []string{
	"internal/testtool", "internal/testtool/...", "sparkplug/sparkplugtest", "uplink/mqtt/mqtttest",
	"tests/...", "scripts/...", "packaging",
}

// transitional are the imports allowed across the rule for now, each with why.
var transitional = map[string]string{}

const module = "fieldlink"

func match(pattern, pkg string) bool {
	if dir, ok := strings.CutSuffix(pattern, "/..."); ok {
		return strings.HasPrefix(pkg, dir+"/")
	}
	return pattern == pkg
}

// layerOf is the index of pkg's layer, len(layers) for test support, -1 when
// no layer names it.
func layerOf(pkg string) int {
	for _, p := range testSupport {
		if match(p, pkg) {
			return len(layers)
		}
	}
	// an exact name wins over a folder: selector/lstm is a leaf under selector/...
	for i, l := range layers {
		for _, p := range l.packages {
			if p == pkg {
				return i
			}
		}
	}
	for i, l := range layers {
		for _, p := range l.packages {
			if match(p, pkg) {
				return i
			}
		}
	}
	return -1
}

// imports is the module's import graph, without tests, for the default build
// and for the build tags the Makefile's checks use.
func imports(t *testing.T) map[string][]string {
	t.Helper()
	g := map[string][]string{}
	for _, tags := range []string{"", "field,nethttpomithttp2,powercut,fleet,crosscheck"} {
		cmd := exec.Command("go", "list", "-deps", "-tags="+tags, "-f", "{{.ImportPath}} {{join .Imports \" \"}}", "./...")
		var stderr bytes.Buffer
		cmd.Stderr = &stderr
		out, err := cmd.Output()
		if err != nil {
			t.Fatalf("go list -tags=%q: %v\n%s", tags, err, stderr.Bytes())
		}
		sc := bufio.NewScanner(bytes.NewReader(out))
		for sc.Scan() {
			f := strings.Fields(sc.Text())
			pkg, ok := inModule(f[0])
			if !ok || pkg == "." { // the module's root holds this test only
				continue
			}
			for _, imp := range f[1:] {
				if dep, ok := inModule(imp); ok && !contains(g[pkg], dep) {
					g[pkg] = append(g[pkg], dep)
				}
			}
			if _, seen := g[pkg]; !seen {
				g[pkg] = nil
			}
		}
	}
	return g
}

func inModule(p string) (string, bool) {
	if p == module {
		return ".", true
	}
	rel, ok := strings.CutPrefix(p, module+"/")
	return path.Clean(rel), ok
}

func contains(s []string, v string) bool {
	for _, x := range s {
		if x == v {
			return true
		}
	}
	return false
}

// TestLayers fails on a package that imports one above it, on an import of
// test support outside tests, and on a package no layer names.
func TestLayers(t *testing.T) {
	g := imports(t)
	pkgs := make([]string, 0, len(g))
	for p := range g {
		pkgs = append(pkgs, p)
	}
	sort.Strings(pkgs)
	for _, pkg := range pkgs {
		from := layerOf(pkg)
		if from < 0 {
			t.Errorf("%s is in no layer: add it to layers (layers_test.go) and to docs/architecture.md", pkg)
			continue
		}
		for _, dep := range g[pkg] {
			to := layerOf(dep)
			if to < 0 || transitional[pkg+" -> "+dep] != "" {
				continue // reported as a package of its own, or allowed for now
			}
			if from < len(layers) && to == len(layers) {
				t.Errorf("%s (%s) imports test support %s", pkg, layers[from].name, dep)
			} else if to > from {
				t.Errorf("%s (%s) imports %s, a layer above it (%s)", pkg, layers[from].name, dep, layers[to].name)
			}
		}
	}
}

// TestLayersInternalLeaves holds docs/architecture.md's rule: internal/ holds
// leaves, which import no other package of the module; test support apart.
func TestLayersInternalLeaves(t *testing.T) {
	for pkg, deps := range imports(t) {
		if !strings.HasPrefix(pkg, "internal/") || layerOf(pkg) == len(layers) {
			continue
		}
		for _, dep := range deps {
			if transitional[pkg+" -> "+dep] == "" {
				t.Errorf("%s imports %s: internal/ holds leaves only", pkg, dep)
			}
		}
	}
}

// undocumented are the packages the layout lists may leave out for now,
// each with why.
var undocumented = map[string]string{}

// TestLayersDocumented holds the README's layout list and
// docs/architecture.md to the packages there are: each names every package,
// by its path or by its last element on a line that names its folder
// ("sensors (`modbus`, `plan`, ...)").
func TestLayersDocumented(t *testing.T) {
	readme, err := os.ReadFile("README.md")
	if err != nil {
		t.Fatal(err)
	}
	_, layout, _ := strings.Cut(string(readme), "\n## Layout\n")
	_, layout, _ = strings.Cut(layout, "```")
	layout, _, _ = strings.Cut(layout, "```")
	arch, err := os.ReadFile("docs/architecture.md")
	if err != nil {
		t.Fatal(err)
	}
	for pkg := range imports(t) {
		if undocumented[pkg] != "" {
			continue
		}
		if !names(layout, pkg) {
			t.Errorf("the README's layout list does not name %s", pkg)
		}
		if !names(string(arch), pkg) {
			t.Errorf("docs/architecture.md does not name %s", pkg)
		}
	}
}

// names reports whether text names the package pkg: its path, or its last
// element on a line that names its folder.
func names(text, pkg string) bool {
	word := func(line, w string) bool {
		return regexp.MustCompile(`(^|[^\w/])` + regexp.QuoteMeta(w) + `($|[^\w/]|/($|\W))`).MatchString(line)
	}
	if word(text, pkg) {
		return true
	}
	dir, base := path.Split(pkg)
	if dir == "" {
		return false
	}
	for line := range strings.SplitSeq(text, "\n") {
		if word(line, strings.TrimSuffix(dir, "/")) && word(line, base) {
			return true
		}
	}
	return false
}
