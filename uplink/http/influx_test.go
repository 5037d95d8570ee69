package http

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"math"
	"net/http"
	"net/http/httptest"
	"net/url"
	"reflect"
	"strconv"
	"strings"
	"testing"
	"time"

	"fieldlink/packet"
	"fieldlink/uplink"
	"fieldlink/uplink/internal/httpc"
)

// influxPacket is a rain gauge's packet at 2026-11-29T08:00:00Z.
func influxPacket(seq uint64, fields ...packet.Field) *packet.Packet {
	return &packet.Packet{
		At: time.Date(2026, 11, 29, 8, 0, 0, 0, time.UTC), SiteID: "001", DataType: "Rain",
		GatewayID: "gw-1", DeviceID: "rain-1", Seq: seq, Fields: fields,
	}
}

func TestInfluxLine(t *testing.T) {
	const ts = " 1795939200000\n" // milliseconds, the default precision
	base := []packet.Field{
		{Name: "Rainfall", Value: packet.Float(0.5, 1)},
		{Name: "Count", Value: packet.Int(-4)},
		{Name: "Raw", Value: packet.Uint(40000)},
		{Name: "isRain", Value: packet.Bool(true)},
		{Name: "State", Value: packet.String("wet, \"very\" \\ much")},
	}
	alarm := influxPacket(9, base...)
	alarm.AlarmFields = []string{"Rainfall", "Count"}
	unsynced := influxPacket(10, packet.Field{Name: "Rainfall", Value: packet.Float(1, 1)})
	unsynced.ClockUnsynced = true
	escaped := influxPacket(11, packet.Field{Name: "wind speed,max=x", Value: packet.Float(3, 0)})
	escaped.DataType, escaped.DeviceID, escaped.SiteID = "Wind Gust,2", "vane=1, north", "a=b"
	noSite := influxPacket(12, packet.Field{Name: "v", Value: packet.Float(3, 0)})
	noSite.SiteID = ""
	collide := influxPacket(13, packet.Field{Name: "seq", Value: packet.String("own")}, packet.Field{Name: "alarm", Value: packet.Bool(false)})
	collide.AlarmFields = []string{"seq"}
	special := influxPacket(14,
		packet.Field{Name: "nan", Value: packet.Float(math.NaN(), -1)},
		packet.Field{Name: "inf", Value: packet.Float(math.Inf(-1), -1)},
		packet.Field{Name: "big", Value: packet.Float(1e21, -1)},
		packet.Field{Name: "word", Value: packet.String("1e3")},
		packet.Field{Name: "empty", Value: packet.String("")},
	)
	const body = "Rainfall=0.5,Count=-4,Raw=40000,isRain=true,State=\"wet, \\\"very\\\" \\\\ much\""
	for _, tc := range []struct {
		name string
		p    *packet.Packet
		want string // the same in both packet encodings
	}{
		{"types", influxPacket(7, base...), "Rain,device=rain-1,gateway=gw-1,site=001 " + body + ",seq=7i" + ts},
		{"alarm", alarm, "Rain,device=rain-1,gateway=gw-1,site=001 " + body + ",seq=9i,alarm=true,alarm_fields=\"Rainfall,Count\"" + ts},
		{"unsynced", unsynced, "Rain,device=rain-1,gateway=gw-1,site=001 Rainfall=1,seq=10i,clock_unsynced=true" + ts},
		{"escaped", escaped, `Wind\ Gust\,2,device=vane\=1\,\ north,gateway=gw-1,site=a\=b wind\ speed\,max\=x=3,seq=11i` + ts},
		{"empty tag left out", noSite, "Rain,device=rain-1,gateway=gw-1 v=3,seq=12i" + ts},
		{"body wins", collide, `Rain,device=rain-1,gateway=gw-1,site=001 seq="own",alarm=false,alarm_fields="seq"` + ts},
		{"special values", special, `Rain,device=rain-1,gateway=gw-1,site=001 big=1000000000000000000000,word="1e3",empty="",seq=14i` + ts},
		{"no field, no line", influxPacket(15), ""},
		{"only NaN, no line", influxPacket(16, packet.Field{Name: "x", Value: packet.Float(math.NaN(), 1)}), ""},
	} {
		for _, style := range []packet.ValueStyle{packet.Strings, packet.Numbers} {
			t.Run(tc.name+"/"+style.String(), func(t *testing.T) {
				got, err := influxBody([]uint64{tc.p.Seq}, [][]byte{tc.p.AppendJSON(nil, style)}, influxMS)
				if err != nil {
					t.Fatal(err)
				}
				if string(got) != tc.want {
					t.Errorf("got  %q\nwant %q", got, tc.want)
				}
			})
		}
	}
}

// TestInfluxLinePrecision: the time is the packet's to the millisecond by
// default, and in seconds when the site file gives precision=s.
func TestInfluxLinePrecision(t *testing.T) {
	p := influxPacket(7, packet.Field{Name: "v", Value: packet.Float(1, 1)})
	p.At = p.At.Add(317 * time.Millisecond)
	for prec, want := range map[string]string{influxMS: " 1795939200317\n", influxS: " 1795939200\n"} {
		got, err := influxBody([]uint64{7}, [][]byte{p.AppendJSON(nil, packet.Strings)}, prec)
		if err != nil || !strings.HasSuffix(string(got), want) {
			t.Errorf("precision %s: %q, %v; want it to end in %q", prec, got, err, want)
		}
	}
}

func TestInfluxLineRefusesWhatItCannotWrite(t *testing.T) {
	for _, tc := range []struct {
		name string
		edit func(p *packet.Packet)
	}{
		{"no DataType", func(p *packet.Packet) { p.DataType = "" }},
		{"comment", func(p *packet.Packet) { p.DataType = "#Rain" }},
		{"line break in a tag", func(p *packet.Packet) { p.DeviceID = "a\nb" }},
		{"trailing backslash", func(p *packet.Packet) { p.SiteID = `001\` }},
		{"backslash before a comma", func(p *packet.Packet) { p.Fields[0].Name = `a\,b` }},
		{"empty field name", func(p *packet.Packet) { p.Fields[0].Name = "" }},
	} {
		t.Run(tc.name, func(t *testing.T) {
			p := influxPacket(3, packet.Field{Name: "v", Value: packet.Float(1, 1)})
			tc.edit(p)
			_, err := influxBody([]uint64{3}, [][]byte{p.AppendJSON(nil, packet.Strings)}, influxMS)
			if !errors.Is(err, errInvalidPacket) || !strings.Contains(err.Error(), "seq 3 cannot be written as line protocol: ") {
				t.Fatalf("err = %v, want errInvalidPacket saying why", err)
			}
		})
	}
	if _, err := influxBody([]uint64{4}, [][]byte{[]byte(`{"a":1}`)}, influxMS); !errors.Is(err, errInvalidPacket) {
		t.Errorf("not a packet: err = %v, want errInvalidPacket", err)
	}
	// A backslash elsewhere in a name is itself.
	p := influxPacket(5, packet.Field{Name: `C:\x`, Value: packet.Float(1, 1)})
	got, err := influxBody([]uint64{5}, [][]byte{p.AppendJSON(nil, packet.Strings)}, influxMS)
	if err != nil || !strings.Contains(string(got), ` C:\x=1,`) {
		t.Errorf("got %q, %v", got, err)
	}
}

func TestInfluxURL(t *testing.T) {
	for _, tc := range []struct {
		in, want, err string
	}{
		{"http://h:8086/write?db=farm", "http://h:8086/write?db=farm&precision=ms", ""},
		{"http://h:8086/write?db=farm&precision=s&rp=week", "http://h:8086/write?db=farm&precision=s&rp=week", ""},
		{"http://h:8086/write?db=farm&precision=ms", "http://h:8086/write?db=farm&precision=ms", ""},
		{"http://h:8086/api/v2/write?org=o&bucket=b", "http://h:8086/api/v2/write?bucket=b&org=o&precision=ms", ""},
		{"http://h/ingest/lines", "http://h/ingest/lines?precision=ms", ""},
		{"http://h:8086/write", "", "needs db"},
		{"http://h:8086/api/v2/write?bucket=b", "", "needs org"},
		{"http://h:8086/write?db=farm&precision=us", "", "precision=us"},
	} {
		u, _ := url.Parse(tc.in)
		_, err := influxURL(u)
		if tc.err != "" {
			if err == nil || !strings.Contains(err.Error(), tc.err) {
				t.Errorf("%s: err = %v, want %q", tc.in, err, tc.err)
			}
			continue
		}
		if err != nil || u.String() != tc.want {
			t.Errorf("%s: got %s, %v; want %s", tc.in, u, err, tc.want)
		}
	}
	_, err := New(Config{URL: "http://h/write?db=x", Encoding: "csv", GatewayID: "g", Epoch: "e"})
	if err == nil || !strings.Contains(err.Error(), `unknown encoding "csv"`) {
		t.Errorf("unknown encoding: %v", err)
	}
}

// TestInfluxV2RequestForm checks the request that InfluxDB 2.x's
// /api/v2/write expects (the Debian InfluxDB the other tests run is 1.x,
// which has no such endpoint): org and bucket kept, precision=ms, the token
// as "Authorization: Token …", line protocol as text.
func TestInfluxV2RequestForm(t *testing.T) {
	const token = "s3cr3t-t0ken=="
	got := make(chan string, 1)
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		q := r.URL.Query()
		var errs []string
		check := func(what, have, want string) {
			if have != want {
				errs = append(errs, fmt.Sprintf("%s = %q, want %q", what, have, want))
			}
		}
		check("method", r.Method, http.MethodPost)
		check("path", r.URL.Path, "/api/v2/write")
		check("org", q.Get("org"), "farm co")
		check("bucket", q.Get("bucket"), "farm/autogen")
		check("precision", q.Get("precision"), "ms")
		check("Authorization", r.Header.Get("Authorization"), "Token "+token)
		check("Content-Type", r.Header.Get("Content-Type"), "text/plain; charset=utf-8")
		body, _ := io.ReadAll(r.Body)
		if len(errs) > 0 {
			http.Error(w, strings.Join(errs, "; "), http.StatusBadRequest)
			return
		}
		got <- string(body)
		w.WriteHeader(http.StatusNoContent)
	}))
	defer srv.Close()
	var logs bytes.Buffer
	h := httpTestPublisher(t, Config{
		URL:      srv.URL + "/api/v2/write?org=farm+co&bucket=farm%2Fautogen",
		Encoding: uplink.EncodingInfluxLine, Token: token,
		Logger: slog.New(slog.NewTextHandler(&logs, &slog.HandlerOptions{Level: slog.LevelDebug})),
	})
	p1 := influxPacket(1, packet.Field{Name: "Rainfall", Value: packet.Float(0.5, 1)})
	p2 := influxPacket(2, packet.Field{Name: "Rainfall", Value: packet.Float(0.75, 2)})
	p2.At = p2.At.Add(time.Minute)
	err := h.post(context.Background(), []uint64{1, 2}, [][]byte{p1.AppendJSON(nil, packet.Strings), p2.AppendJSON(nil, packet.Strings)})
	if err != nil {
		t.Fatal(err)
	}
	want := "Rain,device=rain-1,gateway=gw-1,site=001 Rainfall=0.5,seq=1i 1795939200000\n" +
		"Rain,device=rain-1,gateway=gw-1,site=001 Rainfall=0.75,seq=2i 1795939260000\n"
	if b := <-got; b != want {
		t.Errorf("body\n%s\nwant\n%s", b, want)
	}
	if strings.Contains(logs.String(), token) || strings.Contains(h.Name(), token) {
		t.Errorf("the token shows in the log or the name:\n%s", logs.String())
	}
}

// TestHTTPTokenAndHeaders: a JSON upstream gets the token as a bearer token
// and the custom headers; an answer that quotes them has them blanked, and no
// log line shows them.
func TestHTTPTokenAndHeaders(t *testing.T) {
	const token, key = "bearer-s3cret", "x-key-s3cret"
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		// An unhelpful server that echoes what it was sent.
		w.WriteHeader(http.StatusServiceUnavailable)
		fmt.Fprintf(w, "auth=%s key=%s", r.Header.Get("Authorization"), r.Header.Get("X-Api-Key"))
	}))
	defer srv.Close()
	var logs bytes.Buffer
	h := httpTestPublisher(t, Config{
		URL: srv.URL + "/ingest", Token: token, Header: http.Header{"X-Api-Key": {key}},
		Logger: slog.New(slog.NewTextHandler(&logs, &slog.HandlerOptions{Level: slog.LevelDebug})),
	})
	p := influxPacket(1, packet.Field{Name: "Rainfall", Value: packet.Float(0.5, 1)})
	err := h.post(context.Background(), []uint64{1}, [][]byte{p.AppendJSON(nil, packet.Strings)})
	var he *httpc.Error
	if !errors.As(err, &he) || he.StatusCode != http.StatusServiceUnavailable {
		t.Fatalf("err = %v, want a 503", err)
	}
	if !strings.Contains(he.Body, "auth=Bearer ") || !strings.Contains(he.Body, "key=") {
		t.Errorf("the server did not get the headers: %q", he.Body)
	}
	for _, s := range []string{token, key} {
		if strings.Contains(err.Error(), s) || strings.Contains(logs.String(), s) {
			t.Errorf("%q shows in the error or the log:\n%v\n%s", s, err, logs.String())
		}
	}
	_, err = New(Config{URL: srv.URL, Token: "t", Username: "u", GatewayID: "g", Epoch: "e"})
	if err == nil || !strings.Contains(err.Error(), "exclusive") {
		t.Errorf("token with basic auth: %v", err)
	}
}

// influxParsed is one line of line protocol, read back.
type influxParsed struct {
	Measurement string
	Tags        map[string]string
	Fields      map[string]any // float64, int64, bool or string
	Time        int64
}

// influxParse reads a body of line protocol as InfluxDB's reference
// describes it: measurement (commas and spaces escaped), tags and field keys
// (commas, equals signs and spaces escaped; any other backslash is itself),
// string field values (double quotes and backslashes escaped), integers with
// an i, booleans, floats, and a time in integer units. A line ends with a
// newline, except inside a string field value.
func influxParse(body string) ([]influxParsed, error) {
	var out []influxParsed
	for body != "" {
		p, rest, err := influxParseLine(body)
		if err != nil {
			return nil, fmt.Errorf("%q: %w", body, err)
		}
		out = append(out, p)
		body = rest
	}
	return out, nil
}

// influxParseLine reads the first line of s and returns what follows it.
func influxParseLine(s string) (influxParsed, string, error) {
	p := influxParsed{Tags: map[string]string{}, Fields: map[string]any{}}
	// name reads up to an unescaped stop byte, unescaping esc.
	name := func(stop, esc string) (string, byte) {
		var b strings.Builder
		for len(s) > 0 {
			c := s[0]
			if c == '\\' && len(s) > 1 && strings.IndexByte(esc, s[1]) >= 0 {
				b.WriteByte(s[1])
				s = s[2:]
				continue
			}
			if strings.IndexByte(stop, c) >= 0 {
				s = s[1:]
				return b.String(), c
			}
			b.WriteByte(c)
			s = s[1:]
		}
		return b.String(), 0
	}
	var end byte
	p.Measurement, end = name(", ", ", ")
	if p.Measurement == "" {
		return p, "", errors.New("no measurement")
	}
	for end == ',' {
		var k, v string
		k, end = name("=", ",= ")
		if end != '=' {
			return p, "", errors.New("tag without =")
		}
		v, end = name(", ", ",= ")
		if k == "" || v == "" {
			return p, "", errors.New("empty tag key or value")
		}
		p.Tags[k] = v
	}
	if end != ' ' {
		return p, "", errors.New("no fields")
	}
	for {
		k, e := name("=", ",= ")
		if e != '=' || k == "" {
			return p, "", errors.New("field without a name")
		}
		if _, dup := p.Fields[k]; dup {
			return p, "", fmt.Errorf("field %q twice", k)
		}
		if strings.HasPrefix(s, `"`) {
			var b strings.Builder
			i := 1
			for ; i < len(s) && s[i] != '"'; i++ {
				if s[i] == '\\' && i+1 < len(s) && (s[i+1] == '"' || s[i+1] == '\\') {
					i++
				}
				b.WriteByte(s[i])
			}
			if i == len(s) {
				return p, "", errors.New("unterminated string")
			}
			p.Fields[k] = b.String()
			s = s[i+1:]
			if s == "" {
				return p, "", errors.New("no time")
			}
			e, s = s[0], s[1:]
		} else {
			i := strings.IndexAny(s, ", ")
			if i < 0 {
				return p, "", errors.New("no time")
			}
			v := s[:i]
			e, s = s[i], s[i+1:]
			switch {
			case v == "true" || v == "false":
				p.Fields[k] = v == "true"
			case strings.HasSuffix(v, "i"):
				n, err := strconv.ParseInt(v[:len(v)-1], 10, 64)
				if err != nil {
					return p, "", err
				}
				p.Fields[k] = n
			default:
				f, err := strconv.ParseFloat(v, 64)
				if err != nil {
					return p, "", err
				}
				p.Fields[k] = f
			}
		}
		if e == ' ' {
			break
		}
	}
	ts, rest, ok := strings.Cut(s, "\n")
	if !ok {
		return p, "", errors.New("line without a newline")
	}
	t, err := strconv.ParseInt(ts, 10, 64)
	if err != nil {
		return p, "", fmt.Errorf("time: %w", err)
	}
	p.Time = t
	return p, rest, nil
}

// influxWant is what a packet's line must read back as, by the rules of
// influxValue; ok is false when the packet gives no line.
func influxWant(p *packet.Packet) (influxParsed, bool) {
	w := influxParsed{Measurement: p.DataType, Tags: map[string]string{}, Fields: map[string]any{}, Time: p.At.Unix()}
	for k, v := range map[string]string{"site": p.SiteID, "gateway": p.GatewayID, "device": p.DeviceID} {
		if v != "" {
			w.Tags[k] = v
		}
	}
	for _, f := range p.Fields {
		v := f.Value
		switch s := v.String(); {
		case v.Kind() == packet.KindBool || s == "True" || s == "False":
			w.Fields[f.Name] = s == "True"
		case s == "NaN" || s == "+Inf" || s == "-Inf":
		case v.Kind() != packet.KindString || influxDecimal(s):
			x, _ := strconv.ParseFloat(s, 64)
			w.Fields[f.Name] = x
		default:
			w.Fields[f.Name] = s
		}
	}
	if len(w.Fields) == 0 {
		return w, false
	}
	if _, ok := w.Fields["seq"]; !ok {
		w.Fields["seq"] = int64(p.Seq)
	}
	if p.Alarm() {
		if _, ok := w.Fields["alarm"]; !ok {
			w.Fields["alarm"] = true
		}
		if _, ok := w.Fields["alarm_fields"]; !ok {
			w.Fields["alarm_fields"] = strings.Join(p.AlarmFields, ",")
		}
	}
	return w, true
}

// FuzzInfluxLine writes packets with arbitrary names and values as line
// protocol and reads them back with influxParse: what comes back is the
// packet, or the encoder refused it for a reason it states.
func FuzzInfluxLine(f *testing.F) {
	f.Add("Rain", "rain-1", "001", "Rainfall", "25.30", 0.5, true, false)
	f.Add("Wind Gust,2", "vane=1, north", `a\b`, "speed,max=x", `say "hi" \ `, -1e-7, false, true)
	f.Add("#x", "d\n", `s\`, `f\,`, "NaN", math.Inf(1), true, false)
	f.Add("m", "", "", "seq", "True", 0.0, false, false)
	f.Fuzz(func(t *testing.T, dataType, device, site, name, str string, x float64, b, numbers bool) {
		p := influxPacket(42, packet.Field{Name: name, Value: packet.String(str)},
			packet.Field{Name: name + "_n", Value: packet.Float(x, -1)},
			packet.Field{Name: name + "_b", Value: packet.Bool(b)})
		p.DataType, p.DeviceID, p.SiteID = dataType, device, site
		if b {
			p.AlarmFields = []string{name}
		}
		style := packet.Strings
		if numbers {
			style = packet.Numbers
		}
		data := p.AppendJSON(nil, style)
		body, err := influxBody([]uint64{42}, [][]byte{data}, influxMS)
		if err != nil {
			if !errors.Is(err, errInvalidPacket) {
				t.Fatalf("error %v does not wrap errInvalidPacket", err)
			}
			return
		}
		d, err := packet.Decode(data) // what the encoder saw: invalid UTF-8 as U+FFFD
		if err != nil {
			t.Fatal(err)
		}
		got, err := influxParse(string(body))
		if err != nil {
			t.Fatalf("%q: %v", body, err)
		}
		want, ok := influxWant(d)
		want.Time = d.At.UnixMilli() // the line's precision; influxWant's is InfluxDB's answer's, seconds
		if !ok {
			if len(got) != 0 {
				t.Fatalf("%q: want no line", body)
			}
			return
		}
		if len(got) != 1 || !reflect.DeepEqual(got[0], want) {
			t.Fatalf("%q:\ngot  %+v\nwant %+v", body, got, want)
		}
	})
}
