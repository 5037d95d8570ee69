package testtool

import (
	"bytes"
	"encoding/json"
	"fmt"
	"strings"
	"sync"
	"testing"

	"fieldlink/docs/schema"

	"github.com/santhosh-tekuri/jsonschema/v6"
)

// The schemas of docs/schema, compiled once.
var (
	packetSchema = sync.OnceValues(func() (*jsonschema.Schema, error) { return compileSchema("packet.schema.json") })
	statusSchema = sync.OnceValues(func() (*jsonschema.Schema, error) { return compileSchema("status.schema.json") })
)

func compileSchema(name string) (*jsonschema.Schema, error) {
	b, err := schema.FS.ReadFile(name)
	if err != nil {
		return nil, err
	}
	doc, err := jsonschema.UnmarshalJSON(bytes.NewReader(b))
	if err != nil {
		return nil, fmt.Errorf("%s: %w", name, err)
	}
	c := jsonschema.NewCompiler()
	url := "file:///docs/schema/" + name
	if err := c.AddResource(url, doc); err != nil {
		return nil, fmt.Errorf("%s: %w", name, err)
	}
	return c.Compile(url)
}

// CheckPacket reports how p, one packet as a gateway delivers it, breaks
// docs/schema/packet.schema.json, or that its AlarmFields name a key that
// is not in its DataBody (which a schema cannot say); nil when it is valid.
func CheckPacket(p []byte) error {
	sch, err := packetSchema()
	if err != nil {
		return err
	}
	v, err := jsonschema.UnmarshalJSON(bytes.NewReader(p))
	if err != nil {
		return err
	}
	if err := sch.Validate(v); err != nil {
		return err
	}
	var pk struct {
		DataHead struct{ AlarmFields []string }
		DataBody map[string]json.RawMessage
	}
	if err := json.Unmarshal(p, &pk); err != nil {
		return err
	}
	for _, f := range pk.DataHead.AlarmFields {
		if _, ok := pk.DataBody[f]; !ok {
			return fmt.Errorf("AlarmFields names %q, which is not in DataBody", f)
		}
	}
	return nil
}

// CheckStatus reports how doc, a /status.json document, breaks
// docs/schema/status.schema.json; nil when it is valid.
func CheckStatus(doc []byte) error {
	sch, err := statusSchema()
	if err != nil {
		return err
	}
	v, err := jsonschema.UnmarshalJSON(bytes.NewReader(doc))
	if err != nil {
		return err
	}
	return sch.Validate(v)
}

// ValidPacket fails the test unless p is one packet that
// docs/schema/packet.schema.json accepts (see [CheckPacket]). A trailing
// newline, as on a -print line, is allowed.
func ValidPacket(t testing.TB, p []byte) {
	t.Helper()
	if err := CheckPacket(bytes.TrimSuffix(p, []byte("\n"))); err != nil {
		t.Errorf("packet does not follow docs/schema/packet.schema.json: %v\n%s", err, p)
	}
}

// ValidPacketLines calls [ValidPacket] on every non-empty line of out, the
// output of a command that prints one packet a line, and returns how many
// it checked.
func ValidPacketLines(t testing.TB, out string) int {
	t.Helper()
	n := 0
	for line := range strings.Lines(out) {
		if line = strings.TrimSpace(line); line != "" {
			ValidPacket(t, []byte(line))
			n++
		}
	}
	return n
}

// ValidStatus fails the test unless doc is a /status.json document that
// docs/schema/status.schema.json accepts.
func ValidStatus(t testing.TB, doc []byte) {
	t.Helper()
	if err := CheckStatus(doc); err != nil {
		t.Errorf("/status.json does not follow docs/schema/status.schema.json: %v\n%s", err, doc)
	}
}
