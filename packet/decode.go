package packet

import (
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"math"
	"strconv"
	"strings"
	"time"
)

// Decode parses one packet in the form [Packet.AppendJSON] writes, in either
// [ValueStyle], for tests and tools that look inside packets. It is strict: an
// unknown top-level key, a missing Date, Time, TS or Seq, a nested body value
// or trailing data is an error.
//
// What comes back re-encodes to the same bytes in the same value style, but
// some of what went in is not recoverable from the JSON:
//
//   - Invalid UTF-8 in a string comes back as U+FFFD, which is then written
//     as itself rather than as \ufffd.
//   - At is TS, in UTC, to the millisecond (to the second from a TS
//     without a fraction, which re-encodes with ".000"). Loc is a fixed zone with the offset
//     that Date and Time show against TS (UTC when none), not the named zone.
//   - The id field is the one DataHead key that is not one of the others.
//   - In [Strings] mode every body value comes back as a [String] with the
//     text that was written ("25.30", "True"). In [Numbers] mode a number
//     with no point or exponent is an [Int] (a [Uint] above math.MaxInt64),
//     other numbers are a [Float] whose precision reproduces the written
//     digits, true/false are a [Bool], and null, written for NaN and
//     infinities, is a NaN [Float].
func Decode(data []byte) (*Packet, error) {
	p, err := decode(data)
	if err != nil {
		return nil, fmt.Errorf("packet: decode: %w", err)
	}
	return p, nil
}

// decoder reads a packet token by token: DataBody is ordered, and a map
// would lose the order.
type decoder struct {
	*json.Decoder
}

func decode(data []byte) (*Packet, error) {
	d := decoder{json.NewDecoder(bytes.NewReader(data))}
	d.UseNumber()
	if err := d.delim('{'); err != nil {
		return nil, err
	}
	p := new(Packet)
	var head, body bool
	for d.More() {
		key, err := d.key()
		if err != nil {
			return nil, err
		}
		switch key {
		case "DataHead":
			head = true
			err = d.head(p)
		case "DataBody":
			body = true
			err = d.body(p)
		default:
			err = fmt.Errorf("unknown key %q", key)
		}
		if err != nil {
			return nil, err
		}
	}
	if err := d.delim('}'); err != nil {
		return nil, err
	}
	if _, err := d.Token(); err != io.EOF {
		if err == nil {
			err = errors.New("data after the packet")
		}
		return nil, err
	}
	switch {
	case !head:
		return nil, errors.New("no DataHead")
	case !body:
		return nil, errors.New("no DataBody")
	}
	return p, nil
}

func (d decoder) head(p *Packet) error {
	if err := d.delim('{'); err != nil {
		return err
	}
	var date, clock, ts string
	var seq, alarm bool
	for d.More() {
		key, err := d.key()
		if err != nil {
			return err
		}
		switch key {
		case "Date":
			date, err = d.str(key)
		case "Time":
			clock, err = d.str(key)
		case "TS":
			ts, err = d.str(key)
		case "DataType":
			p.DataType, err = d.str(key)
		case "GatewayId":
			p.GatewayID, err = d.str(key)
		case "DeviceId":
			p.DeviceID, err = d.str(key)
		case "Epoch":
			p.Epoch, err = d.str(key)
		case "Seq":
			seq = true
			p.Seq, err = d.uint(key)
		case "Alarm":
			var s string
			alarm = true
			if s, err = d.str(key); err == nil && s != "True" {
				err = fmt.Errorf("DataHead.Alarm is %q, want \"True\"", s)
			}
		case "AlarmFields":
			p.AlarmFields, err = d.strs(key)
		case "ClockUnsynced":
			var s string
			p.ClockUnsynced = true
			if s, err = d.str(key); err == nil && s != "True" {
				err = fmt.Errorf("DataHead.ClockUnsynced is %q, want \"True\"", s)
			}
		default:
			if p.IDField != "" {
				return fmt.Errorf("DataHead has two id fields, %q and %q", p.IDField, key)
			}
			p.IDField = key
			p.SiteID, err = d.str(key)
		}
		if err != nil {
			return err
		}
	}
	if err := d.delim('}'); err != nil {
		return err
	}
	switch {
	case date == "":
		return errors.New("DataHead has no Date")
	case clock == "":
		return errors.New("DataHead has no Time")
	case ts == "":
		return errors.New("DataHead has no TS")
	case !seq:
		return errors.New("DataHead has no Seq")
	case p.IDField == "":
		return errors.New("DataHead has no id field (FarmId, MineId)")
	case alarm && len(p.AlarmFields) == 0:
		return errors.New("DataHead has Alarm but no AlarmFields")
	case !alarm && len(p.AlarmFields) > 0:
		return errors.New("DataHead has AlarmFields but no Alarm")
	}
	at, err := time.Parse(time.RFC3339, ts)
	if err != nil {
		return fmt.Errorf("DataHead.TS: %w", err)
	}
	local, err := time.Parse("2006-01-02 15:04:05", date+" "+clock)
	if err != nil {
		return fmt.Errorf("DataHead.Date and Time: %w", err)
	}
	p.At = at.UTC()
	p.Loc = time.UTC
	if off := local.Sub(p.At.Truncate(time.Second)); off != 0 {
		if off <= -24*time.Hour || off >= 24*time.Hour {
			return fmt.Errorf("DataHead.Date and Time (%s %s) are a day or more from TS (%s)", date, clock, ts)
		}
		p.Loc = time.FixedZone(zoneName(off), int(off/time.Second))
	}
	return nil
}

// zoneName names a fixed offset as "UTC+08:00".
func zoneName(off time.Duration) string {
	sign := byte('+')
	if off < 0 {
		sign, off = '-', -off
	}
	b := append([]byte("UTC"), sign)
	b = append2(b, int(off/time.Hour))
	b = append(b, ':')
	b = append2(b, int(off/time.Minute%60))
	if s := int(off / time.Second % 60); s != 0 {
		b = append(b, ':')
		b = append2(b, s)
	}
	return string(b)
}

func (d decoder) body(p *Packet) error {
	if err := d.delim('{'); err != nil {
		return err
	}
	for d.More() {
		name, err := d.key()
		if err != nil {
			return err
		}
		tok, err := d.Token()
		if err != nil {
			return err
		}
		var v Value
		switch tok := tok.(type) {
		case string:
			v = String(tok)
		case bool:
			v = Bool(tok)
		case nil:
			v = Float(math.NaN(), -1)
		case json.Number:
			if v, err = number(string(tok)); err != nil {
				return fmt.Errorf("DataBody.%s: %w", name, err)
			}
		default:
			return fmt.Errorf("DataBody.%s is not a string, number, boolean or null", name)
		}
		p.Fields = append(p.Fields, Field{Name: name, Value: v})
	}
	return d.delim('}')
}

// number returns the Value that encodes to the JSON number s in Numbers
// mode, as Decode documents.
func number(s string) (Value, error) {
	if !strings.ContainsAny(s, ".eE") {
		if i, err := strconv.ParseInt(s, 10, 64); err == nil {
			return Int(i), nil
		}
		if u, err := strconv.ParseUint(s, 10, 64); err == nil {
			return Uint(u), nil
		}
	}
	f, err := strconv.ParseFloat(s, 64)
	if err != nil {
		return Value{}, err
	}
	if strings.ContainsAny(s, "eE") {
		return Float(f, -1), nil
	}
	prec := 0
	if dot := strings.IndexByte(s, '.'); dot >= 0 {
		prec = len(s) - dot - 1
	}
	if prec <= math.MaxInt8 {
		var buf [64]byte
		if string(appendFloat(buf[:0], f, prec)) == s {
			return Float(f, prec), nil
		}
	}
	return Float(f, -1), nil
}

func (d decoder) delim(want json.Delim) error {
	tok, err := d.Token()
	if err != nil {
		return err
	}
	if tok != want {
		return fmt.Errorf("got %v, want %v", tok, want)
	}
	return nil
}

func (d decoder) key() (string, error) {
	tok, err := d.Token()
	if err != nil {
		return "", err
	}
	key, ok := tok.(string)
	if !ok { // cannot happen: json.Decoder rejects keys that are not strings
		return "", fmt.Errorf("got %v, want a key", tok)
	}
	return key, nil
}

func (d decoder) str(key string) (string, error) {
	tok, err := d.Token()
	if err != nil {
		return "", err
	}
	s, ok := tok.(string)
	if !ok {
		return "", fmt.Errorf("DataHead.%s is %v, want a string", key, tok)
	}
	return s, nil
}

func (d decoder) uint(key string) (uint64, error) {
	tok, err := d.Token()
	if err != nil {
		return 0, err
	}
	n, ok := tok.(json.Number)
	if !ok {
		return 0, fmt.Errorf("DataHead.%s is %v, want a number", key, tok)
	}
	u, err := strconv.ParseUint(string(n), 10, 64)
	if err != nil {
		return 0, fmt.Errorf("DataHead.%s: %w", key, err)
	}
	return u, nil
}

func (d decoder) strs(key string) ([]string, error) {
	if err := d.delim('['); err != nil {
		return nil, fmt.Errorf("DataHead.%s: %w", key, err)
	}
	var out []string
	for d.More() {
		s, err := d.str(key)
		if err != nil {
			return nil, err
		}
		out = append(out, s)
	}
	return out, d.delim(']')
}
