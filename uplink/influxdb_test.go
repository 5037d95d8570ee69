//go:build linux

package uplink

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"math"
	"net"
	"net/http"
	"net/url"
	"os"
	"os/exec"
	"path/filepath"
	"sort"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"fieldlink/buffer"
	"fieldlink/internal/testtool"
	"fieldlink/packet"
	"fieldlink/selector"
)

// influxd is an InfluxDB 1.x server (Debian's influxdb package) of the test's
// own, on free loopback ports, with its files in a temporary directory.
type influxd struct {
	t          testing.TB
	bin, conf  string
	port       int
	log        testtool.SyncBuffer
	mu         sync.Mutex
	cmd        *exec.Cmd
	exited     chan struct{}
	httpClient http.Client
}

// startInfluxd runs influxd until the test ends; without influxd the test
// is skipped, or fails under CI=true.
func startInfluxd(t testing.TB) *influxd {
	t.Helper()
	bin := testtool.RequireSbin(t, "influxd", "influxdb")
	dir := t.TempDir()
	d := &influxd{t: t, bin: bin, conf: filepath.Join(dir, "influxdb.conf")}
	t.Cleanup(func() {
		d.kill()
		if t.Failed() {
			t.Logf("influxd log:\n%s", d.log.String())
		}
	})
	free := func() int {
		ln, err := net.Listen("tcp", "127.0.0.1:0")
		if err != nil {
			t.Fatal(err)
		}
		defer ln.Close()
		return ln.Addr().(*net.TCPAddr).Port
	}
	for attempt := 1; ; attempt++ {
		d.port = free()
		conf := fmt.Sprintf(`reporting-disabled = true
bind-address = "127.0.0.1:%d"
[meta]
  dir = %q
[data]
  dir = %q
  wal-dir = %q
  query-log-enabled = false
[http]
  bind-address = "127.0.0.1:%d"
  log-enabled = false
[monitor]
  store-enabled = false
[continuous_queries]
  enabled = false
`, free(), filepath.Join(dir, "meta"), filepath.Join(dir, "data"), filepath.Join(dir, "wal"), d.port)
		if err := os.WriteFile(d.conf, []byte(conf), 0o600); err != nil {
			t.Fatal(err)
		}
		err := d.tryStart()
		if err == nil {
			return d
		}
		if attempt == 3 {
			t.Fatalf("influxd did not start: %v\n%s", err, d.log.String())
		}
	}
}

// tryStart runs influxd and waits until /ping answers, or influxd exits.
func (d *influxd) tryStart() error {
	cmd := exec.Command(d.bin, "-config", d.conf)
	cmd.Stdout, cmd.Stderr = &d.log, &d.log
	cmd.SysProcAttr = &syscall.SysProcAttr{Pdeathsig: syscall.SIGKILL}
	if err := cmd.Start(); err != nil {
		return err
	}
	exited := make(chan struct{})
	go func() { _ = cmd.Wait(); close(exited) }()
	d.mu.Lock()
	d.cmd, d.exited = cmd, exited
	d.mu.Unlock()
	deadline := time.Now().Add(30 * time.Second)
	for time.Now().Before(deadline) {
		resp, err := d.httpClient.Get(d.url("/ping", nil))
		if err == nil {
			resp.Body.Close()
			if resp.StatusCode == http.StatusNoContent {
				return nil
			}
		}
		select {
		case <-exited:
			return errors.New("influxd exited")
		case <-time.After(20 * time.Millisecond):
		}
	}
	d.kill()
	return errors.New("influxd did not answer /ping within 30s")
}

// start runs influxd again, on its port and files, after kill.
func (d *influxd) start() {
	d.t.Helper()
	var err error
	for range 5 {
		if err = d.tryStart(); err == nil {
			return
		}
	}
	d.t.Fatalf("influxd: %v\n%s", err, d.log.String())
}

// kill stops influxd with SIGKILL, as a power cut would, and waits for it.
func (d *influxd) kill() {
	d.mu.Lock()
	cmd, exited := d.cmd, d.exited
	d.cmd = nil
	d.mu.Unlock()
	if cmd == nil {
		return
	}
	_ = cmd.Process.Kill()
	<-exited
}

func (d *influxd) url(path string, q url.Values) string {
	u := "http://127.0.0.1:" + strconv.Itoa(d.port) + path
	if q != nil {
		u += "?" + q.Encode()
	}
	return u
}

// influxSeries is one series of a query's answer.
type influxSeries struct {
	Name    string            `json:"name"`
	Tags    map[string]string `json:"tags"`
	Columns []string          `json:"columns"`
	Values  [][]any           `json:"values"`
}

// query runs an InfluxQL statement on db (times in seconds) and returns the
// series of its answer.
func (d *influxd) query(db, q string) []influxSeries {
	d.t.Helper()
	resp, err := d.httpClient.PostForm(d.url("/query", url.Values{"db": {db}, "epoch": {"s"}}), url.Values{"q": {q}})
	if err != nil {
		d.t.Fatal(err)
	}
	defer resp.Body.Close()
	body, _ := io.ReadAll(resp.Body)
	var ans struct {
		Results []struct {
			Series []influxSeries `json:"series"`
			Error  string         `json:"error"`
		} `json:"results"`
		Error string `json:"error"`
	}
	dec := json.NewDecoder(bytes.NewReader(body))
	dec.UseNumber()
	if err := dec.Decode(&ans); err != nil || resp.StatusCode != http.StatusOK || ans.Error != "" || len(ans.Results) != 1 || ans.Results[0].Error != "" {
		d.t.Fatalf("%s: %s %s (%v)", q, resp.Status, body, err)
	}
	return ans.Results[0].Series
}

// influxPoints reads every point of db back as influxParsed, tags split
// from fields by SHOW TAG KEYS, and fields typed by SHOW FIELD KEYS: a
// float must come back as a float, an integer as an integer.
func influxPoints(t *testing.T, d *influxd, db string) []influxParsed {
	t.Helper()
	tagKeys := map[string]map[string]bool{}
	for _, s := range d.query(db, "SHOW TAG KEYS") {
		tagKeys[s.Name] = map[string]bool{}
		for _, v := range s.Values {
			tagKeys[s.Name][v[0].(string)] = true
		}
	}
	fieldTypes := map[string]map[string]string{}
	for _, s := range d.query(db, "SHOW FIELD KEYS") {
		fieldTypes[s.Name] = map[string]string{}
		for _, v := range s.Values {
			fieldTypes[s.Name][v[0].(string)] = v[1].(string)
		}
	}
	var out []influxParsed
	for _, s := range d.query(db, "SELECT * FROM /.*/") {
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

// influxCreate creates database db.
func influxCreate(t *testing.T, d *influxd, db string) {
	t.Helper()
	d.query("", "CREATE DATABASE "+strconv.Quote(db))
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
	d := startInfluxd(t)
	influxCreate(t, d, "farm")
	at := time.Date(2026, 11, 29, 8, 0, 0, 0, time.UTC)
	var ps []*packet.Packet
	add := func(p *packet.Packet) {
		p.Seq = uint64(len(ps) + 1)
		p.At = at.Add(time.Duration(p.Seq) * time.Second)
		ps = append(ps, p)
	}
	for i, enc := range []string{"strings", "numbers"} {
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
		p.DeviceID = "rain-" + enc
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
		enc := packet.Strings
		if i%2 == 1 {
			enc = packet.Numbers
		}
		seqs[i], batch[i] = p.Seq, p.AppendJSON(nil, enc)
		w, ok := influxWant(p)
		if !ok {
			t.Fatalf("packet %d gives no line", i)
		}
		want = append(want, w)
	}
	h := httpTestPublisher(t, HTTPConfig{URL: d.url("/write", url.Values{"db": {"farm"}}), Encoding: EncodingInfluxLine})
	for range 2 { // at least once: the second write is a resend
		if err := h.Post(context.Background(), seqs, batch); err != nil {
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
	d := startInfluxd(t)
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
	dl := NewDelivery(q, table, strat, DeliveryOptions{DeadLetters: influxNoDeadLetters{t, q}, Backoff: 100 * time.Millisecond})
	hs := NewHTTPSender(httpTestPublisher(t, HTTPConfig{
		URL: d.url("/write", url.Values{"db": {"farm"}}), Encoding: EncodingInfluxLine, Epoch: q.Epoch(),
	}), 10, 2)
	idx, err := table.Add(hs.Name(), 1)
	if err != nil {
		t.Fatal(err)
	}
	dl.Add(idx, hs)
	// As the pool does: a probe marks the upstream up again once it answers.
	pr := NewProber("127.0.0.1:"+strconv.Itoa(d.port), 100*time.Millisecond, time.Second, nil, func(rtt time.Duration, err error) {
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
		deadline := time.Now().Add(60 * time.Second)
		for !cond() {
			if time.Now().After(deadline) {
				t.Fatalf("no %s within 60s (buffer holds %d)", what, q.Len())
			}
			time.Sleep(20 * time.Millisecond) // poll-until: the buffer has no event for this
		}
	}

	appendN(20)
	waitFor("delivery before the outage", func() bool { return q.Len() == 0 })
	d.kill()
	appendN(30)
	waitFor("failed send during the outage", func() bool { msg, _ := hs.LastError(); return msg != "" })
	if q.Len() == 0 {
		t.Fatal("the buffer is empty during the outage: the packets went nowhere")
	}
	d.start()
	waitFor("delivery after the outage", func() bool { return q.Len() == 0 })
	influxComparePoints(t, influxPoints(t, d, "farm"), want)
}
