package downlink

import (
	"bytes"
	"crypto/ed25519"
	"encoding/base64"
	"encoding/json"
	"errors"
	"math"
	"strings"
	"testing"
	"time"

	"fieldlink/internal/signing"
)

const fullCommand = `{"id":"cmd-0001","site":"001","gateway":"gw-01","device":"valve-1","point":"Setpoint","value":42.50,` +
	`"issued_at":"2026-03-01T10:00:00+02:00","expires_at":"2026-03-01T10:05:00.5+02:00","actor":"ops:alice"}`

func mustParse(t testing.TB, s string) Command {
	t.Helper()
	c, err := ParseCommand([]byte(s))
	if err != nil {
		t.Fatalf("ParseCommand(%s): %v", s, err)
	}
	return c
}

func TestParseCommand(t *testing.T) {
	c := mustParse(t, fullCommand)
	if c.ID != "cmd-0001" || c.Device != "valve-1" || c.Point != "Setpoint" || c.Actor != "ops:alice" || c.Signature != "" {
		t.Fatalf("fields: %+v", c)
	}
	if f, ok := c.Value.Float(); !ok || f != 42.5 || c.Value.String() != "42.50" {
		t.Fatalf("value %q = %v, %v; want the number 42.5 kept as 42.50", c.Value, f, ok)
	}
	if _, ok := c.Value.Bool(); ok {
		t.Fatal("a number read as a boolean")
	}
	issued := time.Date(2026, 3, 1, 8, 0, 0, 0, time.UTC)
	if !c.IssuedAt.Time().Equal(issued) || !c.ExpiresAt.Time().Equal(issued.Add(5*time.Minute+500*time.Millisecond)) {
		t.Fatalf("times %v %v", c.IssuedAt.Time(), c.ExpiresAt.Time())
	}
	if got := string(c.JSON()); got != fullCommand {
		t.Fatalf("JSON:\n%s\nwant it as sent:\n%s", got, fullCommand)
	}

	// The minimum; optional fields null; a coil; whitespace around.
	m := mustParse(t, " {\n \"id\" : \"a\", \"device\":\"pump 2 <north>\", \"point\":\"温度\",\"value\": true,"+
		`"issued_at":"2026-03-01T10:00:00Z","expires_at":null,"actor":null,"signature":null}`+"\n")
	if b, ok := m.Value.Bool(); !ok || !b || !m.ExpiresAt.IsZero() || m.Actor != "" {
		t.Fatalf("minimal: %+v", m)
	}
	if got, want := string(m.JSON()), `{"id":"a","device":"pump 2 <north>","point":"温度","value":true,"issued_at":"2026-03-01T10:00:00Z"}`; got != want {
		t.Fatalf("minimal JSON:\n%s\nwant\n%s", got, want)
	}
	for _, v := range []string{"false", "-0", "1e3", "0.1000000000000000055511151231257827021181583404541015625", "-17", "1E-400"} {
		c := mustParse(t, strings.Replace(fullCommand, "42.50", v, 1))
		if c.Value.String() != v {
			t.Errorf("value %s kept as %s", v, c.Value)
		}
	}
}

func TestParseCommandErrors(t *testing.T) {
	sig := base64.StdEncoding.EncodeToString(make([]byte, 64))
	repl := func(old, new string) string { return strings.Replace(fullCommand, old, new, 1) }
	for _, c := range []struct{ in, want string }{
		{``, "not JSON"},
		{`[]`, "not a JSON object"},
		{`"x"`, "not a JSON object"},
		{fullCommand + `{}`, "data after the object"},
		{fullCommand[:40], "not JSON"},
		{`{"id":"a","device":"d","point":"p","value":1,"issued_at":"2026-03-01T10:00:00Z",}`, "not JSON"},
		{strings.Replace(fullCommand, `"ops:alice"`, `"`+strings.Repeat("x", 127)+`"`, 1) + strings.Repeat(" ", MaxCommandSize), "over 4096"},
		{repl("valve-1", "valve-\xff"), "not valid UTF-8"},
		{repl(`"id":"cmd-0001",`, ""), "id: missing"},
		{repl(`"device":"valve-1",`, ""), "device: missing"},
		{repl(`"point":"Setpoint",`, ""), "point: missing"},
		{repl(`"value":42.50,`, ""), "value: missing"},
		{repl(`"issued_at":"2026-03-01T10:00:00+02:00",`, ""), "issued_at: missing"},
		{repl(`"actor"`, `"Actor"`), `Actor: unknown field`},
		{repl(`"actor":"ops:alice"`, `"actor":"ops:alice","id":"cmd-0002"`), `"id" given twice`},
		{repl(`"cmd-0001"`, `""`), "id: 0 characters"},
		{repl(`"cmd-0001"`, `"cmd/0001"`), `id: character '/' at 3`},
		{repl(`"cmd-0001"`, `"`+strings.Repeat("a", 65)+`"`), "id: 65 characters"},
		{repl(`"cmd-0001"`, `1`), "id: a number, want a string"},
		{repl(`"cmd-0001"`, `null`), "id: null, want a string"},
		{repl(`"valve-1"`, `""`), "device: 0 bytes"},
		{repl(`"valve-1"`, `"valve\t1"`), "device: character U+0009 at 5"},
		{repl(`"Setpoint"`, `"`+strings.Repeat("p", 129)+`"`), "point: 129 bytes"},
		{repl(`"ops:alice"`, `"ops\u0000"`), "actor: character U+0000"},
		{repl(`"ops:alice"`, `7`), "actor: a number, want a string"},
		{repl(`42.50`, `"42.5"`), "value: a string, want a number or true/false"},
		{repl(`42.50`, `null`), "value: null, want a number"},
		{repl(`42.50`, `[1]`), "value: an array"},
		{repl(`42.50`, `{"v":1}`), "value: an object"},
		{repl(`42.50`, `1e400`), "value: 1e400 is out of range"},
		{repl(`42.50`, `1`+strings.Repeat("0", 70)), "value: a number of 71 characters"},
		{repl(`"2026-03-01T10:00:00+02:00"`, `"yesterday"`), `issued_at: "yesterday": not an RFC 3339 time`},
		{repl(`"2026-03-01T10:00:00+02:00"`, `"2026-03-01 10:00:00"`), `issued_at: "2026-03-01 10:00:00": not an RFC 3339`},
		{repl(`"2026-03-01T10:00:00+02:00"`, `1772352000`), "issued_at: a number, want a string"},
		{repl(`"2026-03-01T10:05:00.5+02:00"`, `"2026-03-01T07:59:59Z"`), "expires_at: 2026-03-01T07:59:59Z is not after issued_at"},
		{repl(`"2026-03-01T10:05:00.5+02:00"`, `"2026-03-01T08:00:00Z"`), "expires_at: 2026-03-01T08:00:00Z is not after issued_at"},
		{repl(`"ops:alice"`, `"ops:alice","signature":"%%%"`), "signature: not standard base64"},
		{repl(`"ops:alice"`, `"ops:alice","signature":"`+strings.TrimRight(sig, "=")+`"`), "signature: not standard base64"},
		{repl(`"ops:alice"`, `"ops:alice","signature":"`+sig[:40]+`"`), "signature: 30 bytes, want an Ed25519 signature of 64"},
		{repl(`"ops:alice"`, `"ops:alice","signature":""`), "signature: 0 bytes"},
	} {
		_, err := ParseCommand([]byte(c.in))
		if err == nil || !strings.Contains(err.Error(), c.want) {
			t.Errorf("ParseCommand(%.80q):\n  %v\n  want %q", c.in, err, c.want)
		}
	}
}

func TestSignAndVerify(t *testing.T) {
	pub, priv, _ := signing.Generate()
	other, _, _ := signing.Generate()
	c := Sign(mustParse(t, fullCommand), priv)
	back := mustParse(t, string(c.JSON()))
	if back != c {
		t.Fatalf("signed command did not read back: %s", c.JSON())
	}
	if err := back.Verify([]ed25519.PublicKey{other, pub}); err != nil {
		t.Fatalf("Verify with the signer's key second: %v", err)
	}
	for name, err := range map[string]error{
		"other key": back.Verify([]ed25519.PublicKey{other}),
		"no keys":   back.Verify(nil),
		"value as 42.5": func() error {
			d := back
			d.Value = Number(42.5) // the same number, other text: not what was signed
			return d.Verify([]ed25519.PublicKey{pub})
		}(),
		"later expiry": func() error {
			d := back
			d.ExpiresAt = NewTimestamp(d.ExpiresAt.Time().Add(time.Hour))
			return d.Verify([]ed25519.PublicKey{pub})
		}(),
		"another gateway": func() error {
			d := back
			d.Gateway = "gw-02"
			return d.Verify([]ed25519.PublicKey{pub})
		}(),
		"another site": func() error {
			d := back
			d.Site = "002"
			return d.Verify([]ed25519.PublicKey{pub})
		}(),
		"actor dropped": func() error {
			d := back
			d.Actor = ""
			return d.Verify([]ed25519.PublicKey{pub})
		}(),
	} {
		if !errors.Is(err, signing.ErrBadSignature) || !strings.Contains(err.Error(), "cmd-0001") {
			t.Errorf("%s: %v, want ErrBadSignature naming the command", name, err)
		}
	}
	unsigned := mustParse(t, fullCommand)
	if err := unsigned.Verify([]ed25519.PublicKey{pub}); err == nil || !strings.Contains(err.Error(), "unsigned") {
		t.Fatalf("an unsigned command: %v", err)
	}
	// A config signature over the same bytes is no command signature.
	cfg := unsigned
	cfg.Signature = base64.StdEncoding.EncodeToString(signing.Sign(priv, "fieldlink config v1", unsigned.SignedMessage()))
	if err := cfg.Verify([]ed25519.PublicKey{pub}); !errors.Is(err, signing.ErrBadSignature) {
		t.Fatalf("a signature for another use verified: %v", err)
	}
}

// TestSignedMessageAsDocumented signs as a platform would, from the doc
// comments alone: netstrings of the texts as sent, under the context, with
// plain Ed25519.
func TestSignedMessageAsDocumented(t *testing.T) {
	pub, priv, _ := signing.Generate()
	c := mustParse(t, fullCommand)
	msg := "3:001,5:gw-01,8:cmd-0001,7:valve-1,8:Setpoint,5:42.50,25:2026-03-01T10:00:00+02:00,27:2026-03-01T10:05:00.5+02:00,9:ops:alice,"
	if got := string(c.SignedMessage()); got != msg {
		t.Fatalf("SignedMessage:\n%s\nwant\n%s", got, msg)
	}
	sig := ed25519.Sign(priv, []byte("fieldlink command v2\x00"+msg))
	signed := strings.TrimSuffix(fullCommand, "}") + `,"signature":"` + base64.StdEncoding.EncodeToString(sig) + `"}`
	if err := mustParse(t, signed).Verify([]ed25519.PublicKey{pub}); err != nil {
		t.Fatalf("a signature made as documented: %v", err)
	}
	// Absent fields are empty netstrings: site, gateway, expires_at and
	// actor (a command naming no gateway is refused, not mis-signed).
	min := mustParse(t, `{"id":"a","device":"d","point":"p","value":false,"issued_at":"2026-03-01T10:00:00Z"}`)
	if got, want := string(min.SignedMessage()), "0:,0:,1:a,1:d,1:p,5:false,20:2026-03-01T10:00:00Z,0:,0:,"; got != want {
		t.Fatalf("SignedMessage without the optional fields: %s, want %s", got, want)
	}
}

func TestValueAndTimestamp(t *testing.T) {
	for _, f := range []float64{math.NaN(), math.Inf(1), math.Inf(-1)} {
		if v := Number(f); !v.IsZero() {
			t.Errorf("Number(%v) = %q, want no value", f, v)
		}
	}
	if v := Number(42.5); v.String() != "42.5" {
		t.Errorf("Number(42.5) = %q", v)
	}
	if v := Number(1e21); v.String() != "1e+21" {
		t.Errorf("Number(1e21) = %q", v)
	}
	if b, ok := Bool(false).Bool(); !ok || b {
		t.Error("Bool(false)")
	}
	if _, ok := Bool(true).Float(); ok {
		t.Error("a boolean read as a number")
	}
	if _, ok := (Value{}).Float(); ok {
		t.Error("no value read as a number")
	}
	var v Value
	if err := json.Unmarshal([]byte(`"1"`), &v); err == nil {
		t.Error("a string unmarshalled into a Value")
	}
	ts := NewTimestamp(time.Date(2026, 3, 1, 10, 0, 0, 5e8, time.FixedZone("", 3600)))
	if ts.String() != "2026-03-01T09:00:00.5Z" {
		t.Errorf("NewTimestamp: %s", ts)
	}
	if !(Timestamp{}).Time().IsZero() {
		t.Error("no time is not the zero time")
	}
	if _, err := parseTimestamp(strings.Repeat("9", 65)); err == nil {
		t.Error("a 65-character timestamp")
	}
}

func TestResultJSON(t *testing.T) {
	at := time.Date(2026, 3, 1, 10, 0, 1, 250e6, time.FixedZone("", 7200))
	r := Result{ID: "cmd-1", Status: StatusDone, Value: mustParse(t, fullCommand).Value, Readback: Number(42.5), At: at}
	if got, want := string(r.JSON()), `{"id":"cmd-1","status":"done","value":42.50,"readback":42.5,"at":"2026-03-01T08:00:01.25Z"}`; got != want {
		t.Fatalf("JSON:\n%s\nwant\n%s", got, want)
	}
	r = Result{ID: "cmd-2", Status: StatusRejected, Reason: "unknown point", At: at}
	if got, want := string(r.JSON()), `{"id":"cmd-2","status":"rejected","reason":"unknown point","at":"2026-03-01T08:00:01.25Z"}`; got != want {
		t.Fatalf("JSON:\n%s\nwant\n%s", got, want)
	}
	var back Result
	if err := json.Unmarshal(Result{ID: "c", Status: StatusFailed, Value: Bool(true), At: at.UTC()}.JSON(), &back); err != nil ||
		back.Value != Bool(true) || !back.At.Equal(at) || back.Status != StatusFailed {
		t.Fatalf("read back: %+v, %v", back, err)
	}
	for s, final := range map[Status]bool{StatusDone: true, StatusRejected: true, StatusExpired: true, StatusFailed: true, StatusUnknownOutcome: true, StatusPending: false, "": false, "ok": false} {
		if s.Final() != final {
			t.Errorf("%q.Final() = %v", s, !final)
		}
	}
	if !bytes.Contains(Result{At: time.Date(10000, 1, 1, 0, 0, 0, 0, time.UTC)}.JSON(), []byte(`"at"`)) {
		t.Error("a result with an unwritable time wrote no JSON")
	}
}

func TestLocalCommand(t *testing.T) {
	now := time.Date(2026, 12, 2, 8, 0, 0, 0, time.UTC)
	for in, want := range map[string]string{"on": "true", "false": "false", "42.5": "42.5", "-3": "-3"} {
		c, err := LocalCommand("valve-1", "Setpoint", in, "local:root", now)
		if err != nil || c.Value.String() != want || c.IssuedAt.Time() != now || !strings.HasPrefix(c.ID, "local-20261202T080000-") {
			t.Errorf("%q: %+v %v", in, c, err)
		}
		if _, err := ParseCommand(c.JSON()); err != nil {
			t.Errorf("%q: the command does not parse back: %v", in, err)
		}
	}
	a, _ := LocalCommand("d", "p", "1", "", now)
	b, _ := LocalCommand("d", "p", "1", "", now)
	if a.ID == b.ID {
		t.Error("two local commands share an id")
	}
	for _, bad := range []string{"", "open", "NaN", "Inf", "1e999"} {
		if _, err := LocalCommand("d", "p", bad, "", now); err == nil {
			t.Errorf("%q accepted", bad)
		}
	}
}

// A local command's device, point and actor take the checks a command from
// the network takes: one that would not parse back must not reach the
// audit log, where it could no longer be read.
func TestLocalCommandNames(t *testing.T) {
	now := time.Date(2026, 12, 2, 8, 0, 0, 0, time.UTC)
	long := strings.Repeat("v", maxNameLength+1)
	for _, tc := range []struct{ device, point, actor, field string }{
		{long, "Setpoint", "", "device"},
		{"valve-1", long, "", "point"},
		{"valve-1", "Setpoint", long, "actor"},
		{"valve\x00-1", "Setpoint", "", "device"},
		{"valve-1", "Set\npoint", "", "point"},
		{"valve-1", "Setpoint", "local:\xff", "actor"},
		{"", "Setpoint", "", "device"},
	} {
		c, err := LocalCommand(tc.device, tc.point, "1", tc.actor, now)
		if err == nil || !strings.Contains(err.Error(), tc.field) {
			t.Errorf("%q %q %q: %+v, %v; want an error naming %s", tc.device, tc.point, tc.actor, c, err, tc.field)
		}
	}
}
