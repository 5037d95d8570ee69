// Package downlink is the gateway's side of commands from the platform:
// writes to actuators (valves, pumps, setpoints) that arrive over MQTT.
// This file is the command and its result as they travel; ledger.go keeps
// their ids, so that a command runs at most once, and audit.go its audit trail.
package downlink

import (
	"bytes"
	"crypto/ed25519"
	"crypto/rand"
	"encoding/base64"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"math"
	"strconv"
	"strings"
	"time"
	"unicode"
	"unicode/utf8"

	"fieldlink/internal/jsonkind"
)

// Bounds of a command, generous for what it carries.
const (
	// MaxCommandSize bounds a command's JSON.
	MaxCommandSize = 4 << 10
	// maxIDLength bounds an id: letters, digits and "._:-".
	maxIDLength = 64
	// maxNameLength bounds device, point and actor.
	maxNameLength = 128
	// maxValueLength bounds the text of a value.
	maxValueLength = 64
	// maxTimeLength bounds the text of a timestamp.
	maxTimeLength = 64
)

// Command is one write to an actuator, as the platform sends it:
//
//	{"id":"…","site":"001","gateway":"gw-01","device":"valve-1",
//	 "point":"Setpoint","value":42.5,"issued_at":"RFC 3339",
//	 "expires_at":"RFC 3339","actor":"ops:alice","signature":"base64"}
//
// id, device, point, value and issued_at are required; site and gateway
// name the gateway the command is for (a signed command must name them:
// see [Engine.Run]). Values and
// timestamps keep their text as sent, so that the command re-encodes to
// what was signed. Commands are comparable with ==.
type Command struct {
	ID        string
	Site      string // the site.id of the gateway it is for; may be empty unless signed
	Gateway   string // the gateway.id it is for; may be empty unless signed
	Device    string
	Point     string
	Value     Value
	IssuedAt  Timestamp
	ExpiresAt Timestamp // zero: no expiry
	Actor     string    // who asked, for the audit log; may be empty
	Signature string    // base64 Ed25519 over SignedMessage; empty: unsigned
}

// ParseCommand reads a command strictly: one JSON object of at most
// MaxCommandSize bytes, valid UTF-8, no unknown or repeated fields, every
// field of its kind and within its bounds. Its errors name the field.
func ParseCommand(data []byte) (Command, error) {
	c, err := parseCommand(data)
	if err != nil {
		return Command{}, err
	}
	return c, nil
}

func parseCommand(data []byte) (Command, error) {
	var c Command
	if len(data) > MaxCommandSize {
		return c, fmt.Errorf("command: %d bytes, over %d", len(data), MaxCommandSize)
	}
	if !utf8.Valid(data) {
		return c, errors.New("command: not valid UTF-8")
	}
	dec := json.NewDecoder(bytes.NewReader(data))
	if tok, err := dec.Token(); err != nil {
		return c, fmt.Errorf("command: not JSON: %w", err)
	} else if d, ok := tok.(json.Delim); !ok || d != '{' {
		return c, errors.New("command: not a JSON object")
	}
	seen := map[string]bool{}
	for dec.More() {
		tok, err := dec.Token()
		if err != nil {
			return c, fmt.Errorf("command: not JSON: %w", err)
		}
		key := tok.(string) // an object's keys are strings, or Token fails
		if seen[key] {
			return c, fmt.Errorf("command: %q given twice", key)
		}
		seen[key] = true
		var raw json.RawMessage
		if err := dec.Decode(&raw); err != nil {
			return c, fmt.Errorf("command: %s: not JSON: %w", key, err)
		}
		if err := c.setField(key, raw); err != nil {
			return c, fmt.Errorf("command: %s: %w", key, err)
		}
	}
	if _, err := dec.Token(); err != nil {
		return c, fmt.Errorf("command: not JSON: %w", err)
	}
	if _, err := dec.Token(); err != io.EOF {
		return c, errors.New("command: data after the object")
	}
	for _, f := range []struct {
		name string
		set  bool
	}{{"id", c.ID != ""}, {"device", c.Device != ""}, {"point", c.Point != ""}, {"value", !c.Value.IsZero()}, {"issued_at", !c.IssuedAt.IsZero()}} {
		if !f.set {
			return c, fmt.Errorf("command: %s: missing", f.name)
		}
	}
	if !c.ExpiresAt.IsZero() && !c.ExpiresAt.Time().After(c.IssuedAt.Time()) {
		return c, fmt.Errorf("command: expires_at: %s is not after issued_at %s", c.ExpiresAt, c.IssuedAt)
	}
	return c, nil
}

// setField sets the field key of c from its JSON text.
func (c *Command) setField(key string, raw json.RawMessage) error {
	null := string(raw) == "null"
	switch key {
	case "id":
		s, err := jsonString(raw)
		if err == nil {
			err = checkID(s)
		}
		c.ID = s
		return err
	case "device", "point":
		s, err := jsonString(raw)
		if err == nil {
			err = checkName(s, false)
		}
		if key == "device" {
			c.Device = s
		} else {
			c.Point = s
		}
		return err
	case "site", "gateway":
		if null {
			return nil
		}
		s, err := jsonString(raw)
		if err == nil {
			err = checkName(s, true)
		}
		if key == "site" {
			c.Site = s
		} else {
			c.Gateway = s
		}
		return err
	case "actor":
		if null {
			return nil
		}
		s, err := jsonString(raw)
		if err == nil {
			err = checkName(s, true)
		}
		c.Actor = s
		return err
	case "value":
		v, err := parseValue(raw)
		c.Value = v
		return err
	case "issued_at", "expires_at":
		if null && key == "expires_at" {
			return nil
		}
		s, err := jsonString(raw)
		if err != nil {
			return err
		}
		t, err := parseTimestamp(s)
		if key == "issued_at" {
			c.IssuedAt = t
		} else {
			c.ExpiresAt = t
		}
		return err
	case "signature":
		if null {
			return nil
		}
		s, err := jsonString(raw)
		if err != nil {
			return err
		}
		sig, err := base64.StdEncoding.DecodeString(s)
		switch {
		case err != nil || base64.StdEncoding.EncodeToString(sig) != s:
			return errors.New("not standard base64")
		case len(sig) != ed25519.SignatureSize:
			return fmt.Errorf("%d bytes, want an Ed25519 signature of %d", len(sig), ed25519.SignatureSize)
		}
		c.Signature = s
		return nil
	}
	return errors.New("unknown field (known: id, site, gateway, device, point, value, issued_at, expires_at, actor, signature)")
}

// jsonString decodes a JSON string; null or another kind is an error.
func jsonString(raw json.RawMessage) (string, error) {
	if len(raw) == 0 || raw[0] != '"' {
		return "", fmt.Errorf("%s, want a string", jsonkind.Of(raw))
	}
	var s string
	if err := json.Unmarshal(raw, &s); err != nil {
		return "", err
	}
	return s, nil
}

// checkID accepts 1 to maxIDLength letters, digits and "._:-": safe in a
// key, a topic and a log line.
func checkID(s string) error {
	if s == "" || len(s) > maxIDLength {
		return fmt.Errorf("%d characters, want 1 to %d", len(s), maxIDLength)
	}
	for i := 0; i < len(s); i++ {
		ch := s[i]
		if !('a' <= ch && ch <= 'z' || 'A' <= ch && ch <= 'Z' || '0' <= ch && ch <= '9' || ch == '.' || ch == '_' || ch == ':' || ch == '-') {
			return fmt.Errorf("character %q at %d: want letters, digits and ._:-", ch, i)
		}
	}
	return nil
}

// checkName accepts up to maxNameLength bytes of printable text (empty only
// when allowed).
func checkName(s string, emptyOK bool) error {
	if (s == "" && !emptyOK) || len(s) > maxNameLength {
		return fmt.Errorf("%d bytes, want 1 to %d", len(s), maxNameLength)
	}
	for i, r := range s {
		if !unicode.IsPrint(r) && r != ' ' || r == utf8.RuneError {
			return fmt.Errorf("character %U at %d: want printable text", r, i)
		}
	}
	return nil
}

// check holds a command built in code (gateway write, a caller of
// [Engine.Run]) to the parser's rules: every field within its bounds, and
// the command reading back from its JSON as itself, as the ledger and the
// audit log will read it. Its errors name the field.
func (c Command) check() error {
	if c.Value.nonFinite != "" {
		return fmt.Errorf("value: %s is not a finite number: there is nothing to write", c.Value.nonFinite)
	}
	if err := checkID(c.ID); err != nil {
		return fmt.Errorf("id: %w", err)
	}
	for _, f := range []struct {
		name, v string
		emptyOK bool
	}{{"site", c.Site, true}, {"gateway", c.Gateway, true}, {"device", c.Device, false}, {"point", c.Point, false}, {"actor", c.Actor, true}} {
		if err := checkName(f.v, f.emptyOK); err != nil {
			return fmt.Errorf("%s: %w", f.name, err)
		}
	}
	back, err := ParseCommand(c.JSON())
	if err != nil {
		return errors.New(strings.TrimPrefix(err.Error(), "command: "))
	}
	if back != c {
		return errors.New("does not read back from its JSON")
	}
	return nil
}

// JSON returns the command as one line of JSON, fields in the documented
// order, values and timestamps as they were given: ParseCommand reads it
// back to the same command.
func (c Command) JSON() []byte {
	b := make([]byte, 0, 256)
	field := func(key string) {
		if len(b) > 1 {
			b = append(b, ',')
		}
		b = append(b, '"')
		b = append(b, key...)
		b = append(b, '"', ':')
	}
	str := func(key, v string) {
		field(key)
		b = appendString(b, v)
	}
	b = append(b, '{')
	str("id", c.ID)
	if c.Site != "" {
		str("site", c.Site)
	}
	if c.Gateway != "" {
		str("gateway", c.Gateway)
	}
	str("device", c.Device)
	str("point", c.Point)
	field("value")
	b, _ = c.Value.appendJSON(b)
	str("issued_at", c.IssuedAt.String())
	if !c.ExpiresAt.IsZero() {
		str("expires_at", c.ExpiresAt.String())
	}
	if c.Actor != "" {
		str("actor", c.Actor)
	}
	if c.Signature != "" {
		str("signature", c.Signature)
	}
	return append(b, '}')
}

// appendString appends s as a JSON string, without encoding/json's HTML
// escapes: a command reads as it was sent.
func appendString(b []byte, s string) []byte {
	var buf bytes.Buffer
	enc := json.NewEncoder(&buf)
	enc.SetEscapeHTML(false)
	_ = enc.Encode(s) // a string always encodes
	return append(b, bytes.TrimSuffix(buf.Bytes(), []byte("\n"))...)
}

// MarshalJSON is JSON, for a command inside other JSON (the audit log).
func (c Command) MarshalJSON() ([]byte, error) { return c.JSON(), nil }

// UnmarshalJSON is ParseCommand.
func (c *Command) UnmarshalJSON(data []byte) error {
	x, err := ParseCommand(data)
	if err != nil {
		return err
	}
	*c = x
	return nil
}

// LocalCommand is a command given on the gateway itself (gateway write):
// value is "true"/"on", "false"/"off" or a number; the id is made unique
// here. Device, point and actor take the checks of a command from the
// network; an error names the one that fails them.
func LocalCommand(device, point, value, actor string, now time.Time) (Command, error) {
	var v Value
	switch value {
	case "true", "on":
		v = Bool(true)
	case "false", "off":
		v = Bool(false)
	default:
		n, err := strconv.ParseFloat(value, 64)
		if err != nil || math.IsNaN(n) || math.IsInf(n, 0) {
			return Command{}, fmt.Errorf("value %q: give a number, or true or false for a coil", value)
		}
		v = Number(n)
	}
	var id [6]byte
	_, _ = rand.Read(id[:])
	c := Command{
		ID:     "local-" + now.UTC().Format("20060102T150405") + "-" + hex.EncodeToString(id[:]),
		Device: device, Point: point, Value: v, IssuedAt: NewTimestamp(now), Actor: actor,
	}
	if err := c.check(); err != nil {
		return Command{}, err
	}
	return c, nil
}
