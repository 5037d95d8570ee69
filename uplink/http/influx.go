package http

import (
	"fmt"
	"math"
	"net/url"
	"strconv"
	"strings"

	"fieldlink/packet"
	"fieldlink/uplink"
)

// The names [appendInfluxLine] gives what it takes from DataHead.
const (
	influxTagSite      = "site"
	influxTagGateway   = "gateway"
	influxTagDevice    = "device"
	influxFieldSeq     = "seq"
	influxFieldAlarm   = "alarm"
	influxFieldAlarms  = "alarm_fields"
	influxFieldUnsync  = "clock_unsynced"
	influxV2WriteSufix = "/api/v2/write"
)

// The precisions of line protocol's times that the gateway writes. The
// packets' time is to the millisecond, and InfluxDB keeps one point per
// series and time: readings less than a second apart are distinct points
// only in milliseconds. Seconds stay for site files that ask for them.
const (
	influxMS = "ms" // the default
	influxS  = "s"
)

// influxURL checks and completes the URL of an influx_line upstream: the
// write endpoint of InfluxDB 1.x (…/write?db=…) or 2.x
// (…/api/v2/write?org=…&bucket=…), or any other path (a proxy in front of
// one). It returns the precision the lines are written in: ms, the
// packets' own, unless the query gives precision=s; another precision is
// an error.
func influxURL(u *url.URL) (string, error) {
	q := u.Query()
	prec := q.Get("precision")
	switch prec {
	case "":
		prec = influxMS
	case influxMS, influxS:
	default:
		return "", fmt.Errorf("precision=%s: the packets' time is to the millisecond, leave precision out or give precision=ms (or s)", prec)
	}
	path := strings.TrimSuffix(u.Path, "/")
	switch {
	case strings.HasSuffix(path, influxV2WriteSufix):
		if q.Get("bucket") == "" || q.Get("org") == "" && q.Get("orgID") == "" {
			return "", fmt.Errorf("InfluxDB 2.x's /api/v2/write needs org (or orgID) and bucket in the query")
		}
	case strings.HasSuffix(path, "/write"):
		if q.Get("db") == "" {
			return "", fmt.Errorf("InfluxDB 1.x's /write needs db in the query (such as /write?db=farm)")
		}
	}
	q.Set("precision", prec)
	u.RawQuery = q.Encode()
	return prec, nil
}

// CheckInfluxURL checks the URL of an influx_line upstream as [New]
// will, for gateway check: InfluxDB 1.x's /write needs db, 2.x's
// /api/v2/write org (or orgID) and bucket, and precision may only be ms
// (the default) or s. The error does not show the URL.
func CheckInfluxURL(raw string) error {
	u, err := url.Parse(raw)
	if err != nil {
		return fmt.Errorf("not a valid URL")
	}
	_, err = influxURL(u)
	return err
}

// influxRefusal is why a packet cannot be written as line protocol. It is
// an [errInvalidPacket] to errors.Is: the upstream can never take it.
type influxRefusal struct {
	seq uint64
	err error
}

func (e *influxRefusal) Error() string {
	return fmt.Sprintf("uplink: seq %d cannot be written as line protocol: %v", e.seq, e.err)
}

func (e *influxRefusal) Is(target error) bool { return target == errInvalidPacket }

// influxBody returns the body of a line-protocol POST: one line per packet,
// in order, each ended by a newline, its time in precision prec (ms or s).
// A packet with no field to write gives no line; the body may then be
// empty. A packet that is not a packet, or whose names line protocol cannot
// carry, is an error that is [errInvalidPacket] to errors.Is.
func influxBody(seqs []uint64, batch [][]byte, prec string) ([]byte, error) {
	n := 0
	for _, p := range batch {
		n += len(p)
	}
	body := make([]byte, 0, n)
	for i, data := range batch {
		p, err := packet.Decode(data)
		if err == nil {
			body, err = appendInfluxLine(body, p, prec)
		}
		if err != nil {
			return nil, &influxRefusal{seqs[i], err}
		}
	}
	return body, nil
}

// appendInfluxLine appends p as one line of InfluxDB line protocol, with its
// newline, or nothing when p has no field to write:
//
//	<DataType>,device=<DeviceId>,gateway=<GatewayId>,site=<site id> <fields> <unix time>
//
// The time is in milliseconds, or in seconds when prec is s.
// Tags are in key order, as InfluxDB prefers them; an empty tag is left out.
// The fields are, in body order, every body value (see [influxValue]),
// then seq (an integer), and, when the head has them, alarm=true with
// alarm_fields (the names, comma-separated) and clock_unsynced=true. A
// body field of one of these names wins over the head's.
func appendInfluxLine(dst []byte, p *packet.Packet, prec string) ([]byte, error) {
	if p.DataType == "" {
		return dst, fmt.Errorf("no DataType, which is the measurement")
	}
	if p.DataType[0] == '#' {
		return dst, fmt.Errorf("DataType %q: a line that starts with # is a comment", p.DataType)
	}
	for _, s := range []struct{ what, v string }{{"DataType", p.DataType}, {"DeviceId", p.DeviceID}, {"GatewayId", p.GatewayID}, {"site id", p.SiteID}} {
		if err := influxCheckName(s.v); err != nil {
			return dst, fmt.Errorf("%s %q: %v", s.what, s.v, err)
		}
	}
	start := len(dst)
	dst = influxEscape(dst, p.DataType, false)
	for _, t := range [...]struct{ k, v string }{{influxTagDevice, p.DeviceID}, {influxTagGateway, p.GatewayID}, {influxTagSite, p.SiteID}} {
		if t.v == "" {
			continue
		}
		dst = append(dst, ',')
		dst = append(dst, t.k...)
		dst = append(dst, '=')
		dst = influxEscape(dst, t.v, true)
	}
	sep := byte(' ')
	body := make(map[string]bool, len(p.Fields))
	for _, f := range p.Fields {
		if err := influxCheckName(f.Name); err != nil {
			return dst[:start], fmt.Errorf("field %q: %v", f.Name, err)
		}
		if f.Name == "" {
			return dst[:start], fmt.Errorf("a field with an empty name")
		}
		body[f.Name] = true
		n := len(dst)
		dst = append(dst, sep)
		dst = influxEscape(dst, f.Name, true)
		dst = append(dst, '=')
		var ok bool
		if dst, ok = influxValue(dst, f.Value); !ok {
			dst = dst[:n] // NaN or infinite: InfluxDB has no such value
			continue
		}
		sep = ','
	}
	if sep == ' ' {
		return dst[:start], nil // nothing measured: no point
	}
	if !body[influxFieldSeq] {
		dst = append(dst, ","+influxFieldSeq+"="...)
		dst = strconv.AppendUint(dst, p.Seq, 10)
		dst = append(dst, 'i')
	}
	if p.Alarm() {
		if !body[influxFieldAlarm] {
			dst = append(dst, ","+influxFieldAlarm+"=true"...)
		}
		if !body[influxFieldAlarms] {
			dst = append(dst, ","+influxFieldAlarms+"="...)
			dst = influxQuote(dst, strings.Join(p.AlarmFields, ","))
		}
	}
	if p.ClockUnsynced && !body[influxFieldUnsync] {
		dst = append(dst, ","+influxFieldUnsync+"=true"...)
	}
	dst = append(dst, ' ')
	if prec == influxS {
		dst = strconv.AppendInt(dst, p.At.Unix(), 10)
	} else {
		dst = strconv.AppendInt(dst, p.At.UnixMilli(), 10)
	}
	return append(dst, '\n'), nil
}

// influxValue appends v as a line-protocol field value, and reports false
// (appending nothing) for NaN and infinities, which InfluxDB cannot store.
//
// Every number is a float: the JSON of a packet does not tell an integer
// register from a float one written in its shortest form ("25" is either),
// in either value style (packet.values), and InfluxDB refuses a value
// whose type differs from the field's earlier ones. A string is read the
// way packet writes values in its default Strings style: "True" and
// "False" are booleans, a decimal number ("-4", "25.30") is a float,
// "NaN", "+Inf" and "-Inf" are left out, and any other text is a string.
func influxValue(dst []byte, v packet.Value) ([]byte, bool) {
	switch v.Kind() {
	case packet.KindBool:
		if f, _ := v.Float64(); f != 0 {
			return append(dst, "true"...), true
		}
		return append(dst, "false"...), true
	case packet.KindFloat, packet.KindInt, packet.KindUint:
		f, _ := v.Float64()
		return influxFloat(dst, f)
	}
	s := v.String()
	switch s {
	case "True":
		return append(dst, "true"...), true
	case "False":
		return append(dst, "false"...), true
	case "NaN", "+Inf", "-Inf":
		return dst, false
	}
	if influxDecimal(s) {
		if f, err := strconv.ParseFloat(s, 64); err == nil {
			return influxFloat(dst, f)
		}
	}
	return influxQuote(dst, s), true
}

// influxFloat appends f without an exponent; a float value needs no point in
// line protocol (only an integer takes the i suffix).
func influxFloat(dst []byte, f float64) ([]byte, bool) {
	if math.IsNaN(f) || math.IsInf(f, 0) {
		return dst, false
	}
	return strconv.AppendFloat(dst, f, 'f', -1, 64), true
}

// influxDecimal reports whether s is a decimal number as packet writes one:
// an optional minus, digits, and optionally a point and digits.
func influxDecimal(s string) bool {
	s = strings.TrimPrefix(s, "-")
	whole, frac, dot := strings.Cut(s, ".")
	digits := func(t string) bool {
		return t != "" && strings.Trim(t, "0123456789") == ""
	}
	return digits(whole) && (!dot || digits(frac))
}

// influxCheckName refuses what a measurement, tag or field name cannot hold
// in line protocol: a line break (there is no escape for it), and a
// backslash at the end or before a comma, equals sign, space or backslash:
// line protocol has no escape for a backslash in a name, so it would escape
// what follows it.
func influxCheckName(s string) error {
	if strings.ContainsAny(s, "\n\r") {
		return fmt.Errorf("line protocol cannot carry a line break in a name")
	}
	for i := 0; i < len(s); i++ {
		if s[i] == '\\' && (i+1 == len(s) || strings.IndexByte(`,= \`, s[i+1]) >= 0) {
			return fmt.Errorf("line protocol cannot carry a backslash at the end of a name or before a comma, equals sign, space or backslash")
		}
	}
	return nil
}

// influxEscape appends s escaped as a measurement (commas and spaces) or,
// with equals set, as a tag key, tag value or field key (commas, equals
// signs and spaces).
func influxEscape(dst []byte, s string, equals bool) []byte {
	for i := 0; i < len(s); i++ {
		c := s[i]
		if c == ',' || c == ' ' || equals && c == '=' {
			dst = append(dst, '\\')
		}
		dst = append(dst, c)
	}
	return dst
}

// influxQuote appends s as a string field value: quoted, with double quotes
// and backslashes escaped.
func influxQuote(dst []byte, s string) []byte {
	dst = append(dst, '"')
	for i := 0; i < len(s); i++ {
		if s[i] == '"' || s[i] == '\\' {
			dst = append(dst, '\\')
		}
		dst = append(dst, s[i])
	}
	return append(dst, '"')
}

// setEncoding applies cfg's Encoding, Token and Header to h and to the
// request URL u (line protocol's precision).
func (h *HTTP) setEncoding(cfg Config, u *url.URL) error {
	switch cfg.Encoding {
	case "", uplink.EncodingJSON:
	case uplink.EncodingInfluxLine:
		h.influx = true
		prec, err := influxURL(u)
		if err != nil {
			return err
		}
		h.precision = prec
	default:
		return fmt.Errorf("unknown encoding %q (valid: json, influx_line)", cfg.Encoding)
	}
	for _, vs := range cfg.Header {
		for _, v := range vs {
			if v != "" {
				h.secrets = append(h.secrets, v)
			}
		}
	}
	if cfg.Token == "" {
		return nil
	}
	if h.header.Get("Authorization") != "" {
		return fmt.Errorf("a token and another Authorization (basic auth or a header) are exclusive")
	}
	scheme := "Bearer "
	if h.influx {
		scheme = "Token " // InfluxDB 2.x, and 1.8 and later
	}
	h.header.Set("Authorization", scheme+cfg.Token)
	h.secrets = append(h.secrets, cfg.Token)
	return nil
}

// body returns the POST body of a batch in h's encoding.
func (h *HTTP) body(seqs []uint64, batch [][]byte) ([]byte, error) {
	if h.influx {
		return influxBody(seqs, batch, h.precision)
	}
	return httpBatchBody(seqs, batch)
}

// contentType returns the Content-Type of h's bodies.
func (h *HTTP) contentType() string {
	if h.influx {
		return "text/plain; charset=utf-8"
	}
	return "application/json"
}
