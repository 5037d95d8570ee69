package http

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"math"
	"math/rand/v2"
	"net/url"
	"path/filepath"
	"sort"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"fieldlink/buffer"
	"fieldlink/internal/testtool"
	"fieldlink/packet"
	"fieldlink/selector"
	"fieldlink/uplink"
)

// influxPoints reads every point of db back as influxParsed, tags split
// from fields by SHOW TAG KEYS, and fields typed by SHOW FIELD KEYS: a
// float must come back as a float, an integer as an integer.
func influxPoints(t *testing.T, d *testtool.Influxd, db string) []influxParsed {
	t.Helper()
	tagKeys := map[string]map[string]bool{}
	for _, s := range d.Query(db, "SHOW TAG KEYS") {
		tagKeys[s.Name] = map[string]bool{}
		for _, v := range s.Values {
			tagKeys[s.Name][v[0].(string)] = true
		}
	}
	fieldTypes := map[string]map[string]string{}
	for _, s := range d.Query(db, "SHOW FIELD KEYS") {
		fieldTypes[s.Name] = map[string]string{}
		for _, v := range s.Values {
			fieldTypes[s.Name][v[0].(string)] = v[1].(string)
		}
	}
	var out []influxParsed
	var series []testtool.InfluxSeries
	for name := range fieldTypes {
		// One measurement at a time: a wildcard over several gives a
		// column one type, and nulls where another measurement's field of
		// that name has another.
		series = append(series, d.Query(db, "SELECT * FROM "+influxIdent(name))...)
	}
	for _, s := range series {
		for _, row := range s.Values {
			p := influxParsed{Measurement: s.Name, Tags: map[string]string{}, Fields: map[string]any{}}
			for i, col := range s.Columns {
				v := row[i]
				switch {
				case col == "time":
					p.Time, _ = v.(json.Number).Int64()
				case v == nil:
				case tagKeys[s.Name][col]:
					p.Tags[col] = v.(string)
				default:
					switch typ := fieldTypes[s.Name][col]; typ {
					case "float":
						p.Fields[col], _ = v.(json.Number).Float64()
					case "integer":
						p.Fields[col], _ = v.(json.Number).Int64()
					case "boolean", "string":
						p.Fields[col] = v
					default:
						t.Fatalf("%s.%s: field type %q", s.Name, col, typ)
					}
				}
			}
			out = append(out, p)
		}
	}
	return out
}

// influxIdent quotes an InfluxQL identifier.
func influxIdent(s string) string {
	return `"` + strings.NewReplacer(`\`, `\\`, `"`, `\"`).Replace(s) + `"`
}

// influxCreate creates database db.
func influxCreate(t *testing.T, d *testtool.Influxd, db string) {
	t.Helper()
	d.Query("", "CREATE DATABASE "+strconv.Quote(db))
}

// influxSortKey orders points for comparison.
func influxSortKey(p influxParsed) string {
	keys := make([]string, 0, len(p.Tags))
	for k, v := range p.Tags {
		keys = append(keys, k+"="+v)
	}
	sort.Strings(keys)
	return fmt.Sprintf("%s|%s|%020d", p.Measurement, strings.Join(keys, ","), p.Time)
}

func influxComparePoints(t *testing.T, got []influxParsed, want []influxParsed) {
	t.Helper()
	sort.Slice(got, func(i, j int) bool { return influxSortKey(got[i]) < influxSortKey(got[j]) })
	sort.Slice(want, func(i, j int) bool { return influxSortKey(want[i]) < influxSortKey(want[j]) })
	if len(got) != len(want) {
		t.Errorf("%d points in InfluxDB, want %d", len(got), len(want))
	}
	for i := range min(len(got), len(want)) {
		g, w := got[i], want[i]
		if influxSortKey(g) != influxSortKey(w) || fmt.Sprint(g.Fields) != fmt.Sprint(w.Fields) {
			t.Errorf("point %d:\ngot  %s %v\nwant %s %v", i, influxSortKey(g), g.Fields, influxSortKey(w), w.Fields)
			continue
		}
		for k, wv := range w.Fields {
			if gv := g.Fields[k]; fmt.Sprintf("%T", gv) != fmt.Sprintf("%T", wv) {
				t.Errorf("point %d field %s: %T, want %T", i, k, gv, wv)
			}
		}
	}
}

// TestInfluxDBStoresEveryReading writes packets of every value type, in
// both packet encodings, with names that need escaping, to a real InfluxDB
// 1.x and reads every point back with its value, type and time; writing the
// same batch again changes nothing.
func TestInfluxDBStoresEveryReading(t *testing.T) {
	d := testtool.StartInfluxd(t)
	influxCreate(t, d, "farm")
	at := time.Date(2026, 11, 29, 8, 0, 0, 0, time.UTC)
	var ps []*packet.Packet
	add := func(p *packet.Packet) {
		p.Seq = uint64(len(ps) + 1)
		p.At = at.Add(time.Duration(p.Seq) * time.Second)
		ps = append(ps, p)
	}
	for i, style := range []string{"strings", "numbers"} {
		p := influxPacket(0,
			packet.Field{Name: "Rainfall", Value: packet.Float(0.5, 1)},
			packet.Field{Name: "Temperature", Value: packet.Float(-3.25, 2)},
			packet.Field{Name: "Whole", Value: packet.Float(25, -1)}, // "25": a float still
			packet.Field{Name: "Count", Value: packet.Int(-4)},
			packet.Field{Name: "Raw", Value: packet.Uint(40000)},
			packet.Field{Name: "isRain", Value: packet.Bool(i == 0)},
			packet.Field{Name: "State", Value: packet.String("wet, \"very\"\\ much\nreally")},
			packet.Field{Name: "Missing", Value: packet.Float(math.NaN(), 1)},
		)
		p.DeviceID = "rain-" + style
		add(p)
	}
	alarm := influxPacket(0, packet.Field{Name: "CH4", Value: packet.Float(1.8, 2)}, packet.Field{Name: "CO", Value: packet.Int(40)})
	alarm.DataType, alarm.IDField, alarm.SiteID, alarm.DeviceID = "Gas", "MineId", "m-7", "gas-1"
	alarm.AlarmFields = []string{"CH4", "CO"}
	add(alarm)
	for _, name := range []string{"Wind Gust,2", `vane=1, north`, `C:\dir\x`, "éolienne \"n°1\"", "a=b,c d"} {
		p := influxPacket(0, packet.Field{Name: name, Value: packet.Float(1.5, 1)}, packet.Field{Name: "v", Value: packet.String(name)})
		p.DataType, p.DeviceID, p.SiteID = name, name, name
		add(p)
	}
	seqs := make([]uint64, len(ps))
	batch := make([][]byte, len(ps))
	var want []influxParsed
	for i, p := range ps {
		style := packet.Strings
		if i%2 == 1 {
			style = packet.Numbers
		}
		seqs[i], batch[i] = p.Seq, p.AppendJSON(nil, style)
		w, ok := influxWant(p)
		if !ok {
			t.Fatalf("packet %d gives no line", i)
		}
		want = append(want, w)
	}
	h := httpTestPublisher(t, Config{URL: d.URL("/write", url.Values{"db": {"farm"}}), Encoding: uplink.EncodingInfluxLine})
	for range 2 { // at least once: the second write is a resend
		if err := h.post(context.Background(), seqs, batch); err != nil {
			t.Fatal(err)
		}
	}
	influxComparePoints(t, influxPoints(t, d, "farm"), want)
}

// influxNoDeadLetters fails the test if a record is dead-lettered.
type influxNoDeadLetters struct {
	t testing.TB
	q *buffer.Buffer
}

func (n influxNoDeadLetters) DeadLetter(reason string, seqs ...uint64) error {
	n.t.Errorf("dead-lettered %v: %s", seqs, reason)
	return n.q.DeadLetter(reason, seqs...)
}

// TestInfluxDBOutageLosesNothing runs the gateway's delivery path (a bbolt
// buffer, the delivery loop, an HTTP upstream in line protocol) to a real
// InfluxDB that is killed in the middle: the packets taken during the
// outage wait in the buffer and every one is in InfluxDB once it is back.
func TestInfluxDBOutageLosesNothing(t *testing.T) {
	d := testtool.StartInfluxd(t)
	influxCreate(t, d, "farm")
	q, err := buffer.Open(filepath.Join(t.TempDir(), "buf.db"), buffer.Options{})
	if err != nil {
		t.Fatal(err)
	}
	defer q.Close()
	table := selector.NewTable(selector.Options{Seed: 1})
	strat, err := selector.New("round_robin", selector.StrategyOptions{})
	if err != nil {
		t.Fatal(err)
	}
	dl := uplink.NewDelivery(q, table, strat, uplink.DeliveryOptions{DeadLetters: influxNoDeadLetters{t, q}, Backoff: 100 * time.Millisecond})
	hs := NewSender(httpTestPublisher(t, Config{
		URL: d.URL("/write", url.Values{"db": {"farm"}}), Encoding: uplink.EncodingInfluxLine, Epoch: q.Epoch(),
	}), 10, 2)
	idx, err := table.Add(hs.Name(), 1)
	if err != nil {
		t.Fatal(err)
	}
	dl.Add(idx, hs)
	// As the pool does: a probe marks the upstream up again once it answers.
	pr := uplink.NewProber(d.Addr(), 100*time.Millisecond, time.Second, nil, func(rtt time.Duration, err error) {
		table.Probe(idx, rtt, err)
		hs.ProbeResult(err)
	})
	ctx, cancel := context.WithCancel(context.Background())
	var wg sync.WaitGroup
	wg.Go(func() { dl.Run(ctx) })
	wg.Go(func() { pr.Run(ctx) })
	defer func() { cancel(); wg.Wait() }()

	at := time.Date(2026, 11, 29, 8, 0, 0, 0, time.UTC)
	var want []influxParsed
	appendN := func(n int) {
		for range n {
			i := len(want)
			p := influxPacket(0, packet.Field{Name: "Rainfall", Value: packet.Float(float64(i)/10, 1)})
			p.At = at.Add(time.Duration(i) * time.Second)
			if _, err := q.Append(ctx, p); err != nil {
				t.Fatal(err)
			}
			w, _ := influxWant(p)
			want = append(want, w)
		}
	}
	waitFor := func(what string, cond func() bool) {
		t.Helper()
		if !testtool.Eventually(60*time.Second, 20*time.Millisecond, cond) { // the buffer has no event for this
			t.Fatalf("no %s within 60s (buffer holds %d)", what, q.Len())
		}
	}

	appendN(20)
	waitFor("delivery before the outage", func() bool { return q.Len() == 0 })
	d.Kill()
	appendN(30)
	waitFor("failed send during the outage", func() bool { msg, _ := hs.LastError(); return msg != "" })
	if q.Len() == 0 {
		t.Fatal("the buffer is empty during the outage: the packets went nowhere")
	}
	d.Start()
	waitFor("delivery after the outage", func() bool { return q.Len() == 0 })
	influxComparePoints(t, influxPoints(t, d, "farm"), want)
}

// TestInfluxDBReadsBackRandomNames is the fuzz test's check against InfluxDB
// itself: packets with random names and strings, drawn from the characters
// line protocol escapes, are written and each read back as it went in, or
// refused by the encoder. Names InfluxDB 1.x treats specially are left out:
// a field named time, which it drops without a word, and a field named as
// one of the tags, which queries show as device_1 (see docs/influx.md).
func TestInfluxDBReadsBackRandomNames(t *testing.T) {
	d := testtool.StartInfluxd(t)
	influxCreate(t, d, "farm")
	rng := rand.New(rand.NewPCG(24, 2))
	// Backslashes and line breaks, which names cannot always carry, now
	// and then.
	common, rare := []rune("aZ09 ,=\"#é_-."), []rune("\\\n")
	word := func() string {
		b := make([]rune, 1+rng.IntN(8))
		for i := range b {
			if rng.IntN(30) == 0 {
				b[i] = rare[rng.IntN(len(rare))]
			} else {
				b[i] = common[rng.IntN(len(common))]
			}
		}
		return string(b)
	}
	at := time.Date(2026, 11, 29, 8, 0, 0, 0, time.UTC)
	var seqs []uint64
	var batch [][]byte
	var want []influxParsed
	refused := 0
	for i := range 300 {
		name := word()
		switch name {
		case "time", "device", "gateway", "site":
			continue
		}
		str := word()
		if rng.IntN(4) == 0 {
			str = strconv.FormatFloat(rng.NormFloat64()*100, 'f', rng.IntN(4), 64)
		}
		p := influxPacket(uint64(i+1), packet.Field{Name: name, Value: packet.String(str)},
			packet.Field{Name: name + "_n", Value: packet.Float(rng.NormFloat64()*1e3, -1)},
			packet.Field{Name: name + "_b", Value: packet.Bool(rng.IntN(2) == 0)})
		// Its own measurement: a field's type is per measurement.
		p.DataType, p.DeviceID, p.SiteID = strconv.Itoa(i)+word(), word(), word()
		p.At = at.Add(time.Duration(i) * time.Second)
		data := p.AppendJSON(nil, packet.ValueStyle(rng.IntN(2)))
		if _, err := influxBody([]uint64{p.Seq}, [][]byte{data}, influxMS); err != nil {
			if !errors.Is(err, errInvalidPacket) {
				t.Fatal(err)
			}
			refused++
			continue
		}
		w, ok := influxWant(p)
		if !ok {
			continue
		}
		seqs, batch, want = append(seqs, p.Seq), append(batch, data), append(want, w)

	}
	t.Logf("%d packets written, %d refused by the encoder", len(want), refused)
	if len(want) < 100 || refused == 0 {
		t.Fatalf("%d packets written, %d refused: the draw does not test much", len(want), refused)
	}
	h := httpTestPublisher(t, Config{URL: d.URL("/write", url.Values{"db": {"farm"}}), Encoding: uplink.EncodingInfluxLine})
	for i := 0; i < len(batch); i += 50 {
		j := min(i+50, len(batch))
		if err := h.post(context.Background(), seqs[i:j], batch[i:j]); err != nil {
			t.Fatal(err)
		}
	}
	influxComparePoints(t, influxPoints(t, d, "farm"), want)
}

// TestInfluxDBKeepsSubSecondReadings writes the readings of a device polled
// every 300 ms for 8 s to a real InfluxDB, as the gateway sends them (the
// default precision): every reading is its own point. InfluxDB keys a point
// by its time, so readings whose times collide would overwrite each other.
func TestInfluxDBKeepsSubSecondReadings(t *testing.T) {
	d := testtool.StartInfluxd(t)
	influxCreate(t, d, "farm")
	at := time.Date(2026, 11, 29, 16, 55, 22, 317e6, time.UTC)
	var seqs []uint64
	var batch [][]byte
	for i := range 27 { // 0 to 7.8 s
		p := influxPacket(uint64(i+1), packet.Field{Name: "Rainfall", Value: packet.Float(float64(i)/10, 1)})
		p.At = at.Add(time.Duration(i) * 300 * time.Millisecond)
		seqs, batch = append(seqs, p.Seq), append(batch, p.AppendJSON(nil, packet.Strings))
	}
	h := httpTestPublisher(t, Config{URL: d.URL("/write", url.Values{"db": {"farm"}}), Encoding: uplink.EncodingInfluxLine})
	for i := 0; i < len(batch); i += 10 {
		j := min(i+10, len(batch))
		if err := h.post(context.Background(), seqs[i:j], batch[i:j]); err != nil {
			t.Fatal(err)
		}
	}
	var stored []int64
	for _, s := range d.Query("farm", "SELECT seq FROM Rain") {
		for _, v := range s.Values {
			seq, _ := v[1].(json.Number).Int64()
			stored = append(stored, seq)
		}
	}
	if len(stored) != len(batch) {
		t.Errorf("%d points stored of %d readings 300 ms apart: seqs %v", len(stored), len(batch), stored)
	}
}
