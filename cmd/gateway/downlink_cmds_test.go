package main

import (
	"crypto/ed25519"
	"encoding/base64"
	"encoding/json"
	"io"
	"log/slog"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"fieldlink/buffer"
	"fieldlink/downlink"
	"fieldlink/internal/signing"
)

const unsignedCommand = `{"id":"cmd-1","device":"valve-1","point":"Setpoint","value":42.50,"issued_at":"2026-03-01T10:00:00Z","actor":"ops:alice"}`

// withStdin makes s what the next command reads on stdin.
func withStdin(t *testing.T, s string) {
	t.Helper()
	old := stdin
	stdin = strings.NewReader(s)
	t.Cleanup(func() { stdin = old })
}

func TestKeygenAndCommandSign(t *testing.T) {
	name := filepath.Join(t.TempDir(), "ops")
	code, out, errOut := gw(t, "keygen", "-o", name)
	if code != 0 || !strings.Contains(out, name+".key") || !strings.Contains(out, name+".pub") {
		t.Fatalf("keygen: %d\n%s%s", code, out, errOut)
	}
	if code, _, errOut := gw(t, "keygen", "-o", name); code != 1 || !strings.Contains(errOut, name+".key exists") {
		t.Fatalf("keygen over an existing pair: %d %s", code, errOut)
	}
	if code, _, _ := gw(t, "keygen"); code != 2 {
		t.Fatalf("keygen without -o: exit %d, want 2", code)
	}
	priv, err := signing.LoadPrivate(name + ".key")
	if err != nil {
		t.Fatal(err)
	}
	secret := base64.StdEncoding.EncodeToString(priv.Seed())
	pub, err := signing.LoadPublic(name + ".pub")
	if err != nil {
		t.Fatal(err)
	}

	withStdin(t, unsignedCommand+"\n")
	code, out, errOut = gw(t, "command", "sign", "-key", name+".key", "-site", "001", "-gateway", "gw-01")
	if code != 0 || strings.Count(out, "\n") != 1 {
		t.Fatalf("command sign: %d\n%s%s", code, out, errOut)
	}
	c, err := downlink.ParseCommand([]byte(out))
	if err != nil {
		t.Fatalf("the signed command does not parse: %v\n%s", err, out)
	}
	if err := c.Verify([]ed25519.PublicKey{pub}); err != nil {
		t.Fatalf("the signed command does not verify with %s.pub: %v", name, err)
	}
	if c.Site != "001" || c.Gateway != "gw-01" || !strings.Contains(out, `"site":"001","gateway":"gw-01"`) {
		t.Fatalf("the signed command is not bound to site 001, gateway gw-01: %s", out)
	}
	if c.Value.String() != "42.50" || !strings.Contains(errOut, signing.KeyID(pub)) {
		t.Fatalf("value %s; stderr %q", c.Value, errOut)
	}
	if strings.Contains(out+errOut, secret) {
		t.Fatal("command sign printed the private key")
	}

	// Signed again: the signature is replaced, and says so; the site and
	// gateway the command names are kept.
	withStdin(t, out)
	if code, out2, errOut := gw(t, "command", "sign", "-key", name+".key"); code != 0 || out2 != out || !strings.Contains(errOut, "replaced") {
		t.Fatalf("re-signing: %d %q %s", code, out2, errOut)
	}
	// A signature must name the gateway and the site; flags that contradict
	// the command are refused rather than signing one of them.
	withStdin(t, unsignedCommand)
	if code, _, errOut := gw(t, "command", "sign", "-key", name+".key", "-site", "001"); code != 2 || !strings.Contains(errOut, "-gateway") {
		t.Fatalf("without -gateway: %d %s", code, errOut)
	}
	withStdin(t, unsignedCommand)
	if code, _, errOut := gw(t, "command", "sign", "-key", name+".key", "-gateway", "gw-01"); code != 2 || !strings.Contains(errOut, "-site") {
		t.Fatalf("without -site: %d %s", code, errOut)
	}
	withStdin(t, out)
	if code, _, errOut := gw(t, "command", "sign", "-key", name+".key", "-gateway", "gw-02"); code != 1 || !strings.Contains(errOut, "names gateway gw-01, not gw-02") {
		t.Fatalf("-gateway against the command's: %d %s", code, errOut)
	}
	withStdin(t, strings.Replace(unsignedCommand, "42.50", `"42.5"`, 1))
	if code, _, errOut := gw(t, "command", "sign", "-key", name+".key", "-site", "001", "-gateway", "gw-01"); code != 1 || !strings.Contains(errOut, "value: a string") {
		t.Fatalf("a bad command: %d %s", code, errOut)
	}
	if code, _, errOut := gw(t, "command", "sign", "-key", name+".pub", "-site", "001", "-gateway", "gw-01"); code != 1 || !strings.Contains(errOut, "is a public key file") {
		t.Fatalf("signing with the .pub: %d %s", code, errOut)
	}
	if err := os.Chmod(name+".key", 0o644); err != nil {
		t.Fatal(err)
	}
	withStdin(t, unsignedCommand)
	code, _, errOut = gw(t, "command", "sign", "-key", name+".key", "-site", "001", "-gateway", "gw-01")
	if code != 1 || !strings.Contains(errOut, name+".key is open to group or others") || strings.Contains(errOut, secret) {
		t.Fatalf("a key open to others: %d %s", code, errOut)
	}
	if code, _, _ := gw(t, "command", "verify"); code != 2 {
		t.Fatalf("command verify: exit %d, want 2", code)
	}
}

// auditSite writes a site file whose buffer is dir/buf.db.
func auditSite(t *testing.T, dir string) string {
	sf := mineSite(filepath.Join(dir, "buf.db"), "127.0.0.1:1", "")
	sf.Site, sf.Gateway, sf.Uplink = `{id: "F1", id_field: FarmId}`, "gw-a", nil
	return sf.Write(t, "")
}

func TestAuditCommand(t *testing.T) {
	dir := t.TempDir()
	site := auditSite(t, dir)
	if code, _, errOut := gw(t, "audit", "-c", site); code != 1 || !strings.Contains(errOut, "no buffer file at "+dir+"/buf.db") {
		t.Fatalf("audit without a buffer file: %d %s", code, errOut)
	}
	if _, err := os.Stat(filepath.Join(dir, "buf.db")); err == nil {
		t.Fatal("audit created the buffer file")
	}

	// Two commands through the store, the second signed.
	_, priv, _ := signing.Generate()
	buf, err := buffer.Open(filepath.Join(dir, "buf.db"), buffer.Options{Logger: slog.New(slog.NewTextHandler(io.Discard, nil))})
	if err != nil {
		t.Fatal(err)
	}
	t0 := time.Date(2026, 3, 1, 10, 0, 0, 0, time.UTC)
	st, err := downlink.OpenLedger(buf, downlink.LedgerOptions{Now: func() time.Time { return t0 }})
	if err != nil {
		t.Fatal(err)
	}
	c1, _ := downlink.ParseCommand([]byte(unsignedCommand))
	c2 := c1
	c2.ID, c2.Point, c2.Value = "cmd-2", "Open", downlink.Bool(true)
	c2 = downlink.Sign(c2, priv)
	for _, c := range []downlink.Command{c1, c2} {
		if r, err := st.Begin(c, t0); r != nil || err != nil {
			t.Fatalf("Begin %s: %v %v", c.ID, r, err)
		}
	}
	if err := st.Finish(downlink.Result{ID: "cmd-1", Status: downlink.StatusDone, Value: c1.Value, Readback: downlink.Number(42.5), At: t0}); err != nil {
		t.Fatal(err)
	}
	forged := c1
	forged.ID = "cmd-9"
	if err := st.Refused(&forged, downlink.Result{ID: "cmd-9", Status: downlink.StatusRejected, Reason: "unsigned", At: t0.Add(time.Second)}); err != nil {
		t.Fatal(err)
	}

	// While the file is held (as by a running gateway), audit says why it cannot read it.
	code, _, errOut := gw(t, "audit", "-c", site)
	if code != 1 || !strings.Contains(errOut, "the gateway is running: it holds ") {
		t.Fatalf("audit of a held file: %d %s", code, errOut)
	}
	if err := buf.Close(); err != nil {
		t.Fatal(err)
	}

	code, out, errOut := gw(t, "audit", "-c", site)
	lines := strings.Split(strings.TrimSuffix(out, "\n"), "\n")
	if code != 0 || len(lines) != 5 {
		t.Fatalf("audit: %d, %d lines\n%s%s", code, len(lines), out, errOut)
	}
	for i, want := range [][]string{
		{"1  2026-03-01T10:00:00Z  start", "command record begins"},
		{"2  2026-03-01T10:00:00Z  received", "cmd-1  valve-1.Setpoint = 42.50  by ops:alice"},
		{"3  2026-03-01T10:00:00Z  received", "cmd-2  valve-1.Open = true", "signed"},
		{"4  2026-03-01T10:00:00Z  result", "cmd-1", "→ done  readback 42.5"},
		{"r1  2026-03-01T10:00:01Z  refused", "cmd-9", "→ rejected: unsigned"},
	} {
		for _, w := range want {
			if !strings.Contains(lines[i], w) {
				t.Errorf("line %d lacks %q: %s", i+1, w, lines[i])
			}
		}
	}
	code, out, _ = gw(t, "audit", "-c", site, "-json")
	jl := strings.Split(strings.TrimSuffix(out, "\n"), "\n")[:4]
	if code != 0 || len(jl) != 4 {
		t.Fatalf("audit -json: %d\n%s", code, out)
	}
	for i, l := range jl {
		var e downlink.AuditEntry
		if err := json.Unmarshal([]byte(l), &e); err != nil || e.Seq != uint64(i+1) || len(e.Hash) != 64 {
			t.Fatalf("-json line %d: %v %+v", i+1, err, e)
		}
		if i == 2 && (e.Command == nil || e.Command.Signature != c2.Signature) {
			t.Fatalf("-json line 3 lost the signature: %s", l)
		}
	}
	if code, out, errOut := gw(t, "audit", "-c", site, "-verify"); code != 0 || !strings.Contains(out, "ok, entries 1 to 4 (4)") ||
		!strings.Contains(out, "refusal log (commands refused before they were taken up, kept apart): ok, entries 1 to 1 (1)") {
		t.Fatalf("audit -verify: %d %s%s", code, out, errOut)
	}

	// Entry 3 deleted: -verify fails and names it.
	buf, err = buffer.Open(filepath.Join(dir, "buf.db"), buffer.Options{Logger: slog.New(slog.NewTextHandler(io.Discard, nil))})
	if err != nil {
		t.Fatal(err)
	}
	var key3 string
	_ = buf.ScanAux("downlink.audit/", func(k string, _ []byte) error {
		if strings.HasSuffix(k, "0003") {
			key3 = k
		}
		return nil
	})
	if err := buf.DeleteAux(key3); err != nil || key3 == "" {
		t.Fatalf("delete entry 3 (%q): %v", key3, err)
	}
	if err := buf.Close(); err != nil {
		t.Fatal(err)
	}
	code, _, errOut = gw(t, "audit", "-c", site, "-verify")
	if code != 1 || !strings.Contains(errOut, "entry 3: missing") {
		t.Fatalf("audit -verify of a log with entry 3 deleted: %d %s", code, errOut)
	}
}
