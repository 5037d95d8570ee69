// Package sparkplugtest lets tests check Sparkplug B payloads against
// Eclipse Tahu's JavaScript payload library (npm sparkplug-payload), run
// with Node: an implementation no one here wrote.
package sparkplugtest

import (
	"bufio"
	"bytes"
	"encoding/base64"
	"encoding/json"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"runtime"
	"strings"
	"testing"

	"fieldlink/internal/testtool"
)

// TahuPackage is the npm package and version the tests decode with.
const TahuPackage = "sparkplug-payload@1.0.3"

// Tahu runs Tahu's payload library.
type Tahu struct {
	node     string
	script   string
	nodePath string
}

// CacheDir is where [NewTahu] installs the npm package when it is missing:
// <user cache dir>/fieldlink/tahu-sparkplug-payload-1.0.3 (CI installs it
// there beforehand).
func CacheDir() (string, error) {
	d, err := os.UserCacheDir()
	if err != nil {
		return "", err
	}
	return filepath.Join(d, "fieldlink", "tahu-"+strings.ReplaceAll(TahuPackage, "@", "-")), nil
}

// NewTahu finds node and the npm package, installing the package into
// [CacheDir] with npm when it is not there. A missing node or npm, or an
// install that fails, skips the test locally and fails it under CI.
func NewTahu(t testing.TB) *Tahu {
	t.Helper()
	node := testtool.Require(t, "node", "nodejs")
	dir, err := CacheDir()
	if err != nil {
		testtool.Unsupported(t, "no user cache directory for the npm package: "+err.Error())
	}
	if _, err := os.Stat(filepath.Join(dir, "node_modules", "sparkplug-payload", "package.json")); err != nil {
		install(t, dir)
	}
	_, file, _, _ := runtime.Caller(0)
	return &Tahu{
		node:     node,
		script:   filepath.Join(filepath.Dir(file), "..", "testdata", "tahu.js"),
		nodePath: filepath.Join(dir, "node_modules"),
	}
}

// install runs npm install into a fresh directory beside dir and renames
// it to dir, so that tests of several packages installing at once never
// see half an installation.
func install(t testing.TB, dir string) {
	t.Helper()
	npm := testtool.Require(t, "npm", "npm")
	if err := os.MkdirAll(filepath.Dir(dir), 0o755); err != nil {
		testtool.Unsupported(t, err.Error())
	}
	tmp, err := os.MkdirTemp(filepath.Dir(dir), "install-")
	if err != nil {
		testtool.Unsupported(t, err.Error())
	}
	defer os.RemoveAll(tmp)
	out, err := exec.Command(npm, "install", "--no-audit", "--no-fund", "--prefix", tmp, TahuPackage).CombinedOutput()
	if err != nil {
		testtool.Missing(t, fmt.Sprintf("npm package %s (npm install failed: %v: %s)", TahuPackage, err, bytes.TrimSpace(out)), "npm")
	}
	if err := os.Rename(tmp, dir); err != nil {
		if _, serr := os.Stat(filepath.Join(dir, "node_modules", "sparkplug-payload")); serr != nil {
			t.Fatalf("install %s into %s: %v", TahuPackage, dir, err)
		}
	}
}

func (h *Tahu) run(t testing.TB, mode string, lines []string) []string {
	t.Helper()
	cmd := exec.Command(h.node, h.script, mode)
	cmd.Env = append(os.Environ(), "NODE_PATH="+h.nodePath)
	cmd.Stdin = strings.NewReader(strings.Join(lines, "\n") + "\n")
	var stderr bytes.Buffer
	cmd.Stderr = &stderr
	out, err := cmd.Output()
	if err != nil {
		t.Fatalf("node tahu.js %s: %v: %s", mode, err, stderr.String())
	}
	var res []string
	sc := bufio.NewScanner(bytes.NewReader(out))
	sc.Buffer(nil, 1<<24)
	for sc.Scan() {
		res = append(res, sc.Text())
	}
	if len(res) != len(lines) {
		t.Fatalf("node tahu.js %s: %d lines in, %d out: %s", mode, len(lines), len(res), stderr.String())
	}
	return res
}

// Payload is a payload as Tahu decodes it. 64-bit integers are decimal
// strings, bytes base64; a field Tahu leaves out is nil.
type Payload struct {
	Timestamp *string  `json:"timestamp"`
	Seq       *string  `json:"seq"`
	UUID      *string  `json:"uuid"`
	Metrics   []Metric `json:"metrics"`
}

// Metric is a metric as Tahu decodes it. Value is null for an is_null
// metric, a JSON number for integers up to 32 bits, floats and doubles,
// a decimal string for 64-bit integers, true or false, or a string.
type Metric struct {
	Name         *string             `json:"name"`
	Alias        *string             `json:"alias"`
	Type         string              `json:"type"`
	Value        json.RawMessage     `json:"value"`
	Timestamp    *string             `json:"timestamp"`
	IsHistorical *bool               `json:"isHistorical"`
	IsTransient  *bool               `json:"isTransient"`
	Properties   map[string]Property `json:"properties"`
}

// Property is a property as Tahu decodes it.
type Property struct {
	Type  string          `json:"type"`
	Value json.RawMessage `json:"value"`
}

// Decode decodes each payload with Tahu.
func (h *Tahu) Decode(t testing.TB, payloads ...[]byte) []Payload {
	t.Helper()
	lines := make([]string, len(payloads))
	for i, p := range payloads {
		lines[i] = base64.StdEncoding.EncodeToString(p)
	}
	out := h.run(t, "decode", lines)
	res := make([]Payload, len(out))
	for i, l := range out {
		if err := json.Unmarshal([]byte(l), &res[i]); err != nil {
			t.Fatalf("Tahu's decoding %q: %v", l, err)
		}
	}
	return res
}

// Encode encodes each object with Tahu's encodePayload: objects are
// marshalled to JSON, in the form Tahu takes (timestamp, seq, metrics
// with name, alias, type as a name such as "Boolean", value).
func (h *Tahu) Encode(t testing.TB, objects ...any) [][]byte {
	t.Helper()
	lines := make([]string, len(objects))
	for i, o := range objects {
		b, err := json.Marshal(o)
		if err != nil {
			t.Fatal(err)
		}
		lines[i] = string(b)
	}
	out := h.run(t, "encode", lines)
	res := make([][]byte, len(out))
	for i, l := range out {
		b, err := base64.StdEncoding.DecodeString(l)
		if err != nil {
			t.Fatalf("Tahu's encoding %q: %v", l, err)
		}
		res[i] = b
	}
	return res
}
