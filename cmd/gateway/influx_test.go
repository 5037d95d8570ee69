package main

import (
	"encoding/json"
	"fmt"
	"path/filepath"
	"sort"
	"testing"
	"time"

	"fieldlink/internal/testtool"
)

// TestRunWritesToInfluxDB runs the real binary with an emulated anemometer
// and an influx_line upstream to a real InfluxDB 1.x: the site file's
// encoding reaches the uplink, and the readings are points of measurement
// Wind with the site's tags, a float WindSpeed, an integer seq, and every
// seq from the first to the last written.
func TestRunWritesToInfluxDB(t *testing.T) {
	d := testtool.StartInfluxd(t)
	d.Query("", `CREATE DATABASE "farm"`)
	bin := testtool.BuildGateway(t)
	_, emu := serve(t, false, "generic-wind-speed")
	dir := t.TempDir()
	sf := windSite("gw-influx", "off", filepath.Join(dir, "buffer.db"), emu, fmt.Sprintf(`{url: "%s", encoding: influx_line}`, d.URL("/write", map[string][]string{"db": {"farm"}})))
	sf.Devices[0] = "{name: wind-1, profile: generic-wind-speed, slave: 1, interval: 2s}"
	site := sf.Write(t, dir)
	if r := runGateway(t, bin, nil, 0, nil, "check", "-c", site); r.code != 0 {
		t.Fatalf("check: exit %d\n%s%s", r.code, r.stdout.String(), r.stderr.String())
	}
	count := func() int {
		n := 0
		for _, s := range d.Query("farm", "SELECT WindSpeed FROM Wind") {
			n += len(s.Values)
		}
		return n
	}
	start := time.Now()
	r := runGateway(t, bin, nil, 100*time.Millisecond, func(*gatewayRun) {
		testtool.WaitFor(t, 60*time.Second, "three points in InfluxDB", func() bool { return count() >= 3 })
	}, "run", "-c", site)
	if r.code != 0 {
		t.Errorf("run: exit %d\n%s", r.code, r.stderr.String())
	}

	types := map[string]string{}
	for _, s := range d.Query("farm", "SHOW FIELD KEYS FROM Wind") {
		for _, v := range s.Values {
			types[v[0].(string)] = v[1].(string)
		}
	}
	if types["WindSpeed"] != "float" || types["seq"] != "integer" {
		t.Errorf("field types %v, want WindSpeed float and seq integer", types)
	}
	series := d.Query("farm", `SELECT WindSpeed, seq FROM Wind GROUP BY *`)
	if len(series) != 1 {
		t.Fatalf("%d series, want one: %+v", len(series), series)
	}
	s := series[0]
	if want := map[string]string{"site": "001", "gateway": "gw-influx", "device": "wind-1"}; fmt.Sprint(s.Tags) != fmt.Sprint(want) {
		t.Errorf("tags %v, want %v", s.Tags, want)
	}
	var seqs []int
	for _, v := range s.Values {
		at, _ := v[0].(json.Number).Int64()
		if ts := time.Unix(at, 0); ts.Before(start.Add(-time.Minute)) || ts.After(time.Now().Add(time.Minute)) {
			t.Errorf("point at %v: not the reading time (the test ran from %v)", ts, start)
		}
		if _, err := v[1].(json.Number).Float64(); err != nil {
			t.Errorf("WindSpeed %v: %v", v[1], err)
		}
		seq, _ := v[2].(json.Number).Int64()
		seqs = append(seqs, int(seq))
	}
	sort.Ints(seqs)
	for i, seq := range seqs {
		if seq != i+1 {
			t.Fatalf("seqs %v: want 1 to %d, each once", seqs, len(seqs))
		}
	}
	if t.Failed() {
		t.Logf("gateway log:\n%s", r.stderr.String())
	}
}

// TestRunKeepsSubSecondReadingsInInfluxDB runs the real binary with a
// device polled every 300 ms, for a few seconds, to a real InfluxDB: every
// reading is a point of its own (InfluxDB keeps one point per series and
// time), every seq from 1 to 15 (4.5 s of readings).
func TestRunKeepsSubSecondReadingsInInfluxDB(t *testing.T) {
	d := testtool.StartInfluxd(t)
	d.Query("", `CREATE DATABASE "farm"`)
	bin := testtool.BuildGateway(t)
	_, emu := serve(t, false, "generic-wind-speed")
	dir := t.TempDir()
	sf := windSite("gw-influx-ms", "off", filepath.Join(dir, "buffer.db"), emu, fmt.Sprintf(`{url: "%s", encoding: influx_line}`, d.URL("/write", map[string][]string{"db": {"farm"}})))
	sf.Devices[0] = "{name: wind-1, profile: generic-wind-speed, slave: 1, interval: 300ms}"
	site := sf.Write(t, dir)
	const want = 15
	var got []int // the seqs stored, up to want
	stored := func() bool {
		got = got[:0]
		for _, s := range d.Query("farm", "SELECT seq FROM Wind") {
			for _, v := range s.Values {
				if seq, _ := v[1].(json.Number).Int64(); seq <= want {
					got = append(got, int(seq))
				}
			}
		}
		return len(got) == want
	}
	r := runGateway(t, bin, nil, 100*time.Millisecond, func(*gatewayRun) {
		if !testtool.Eventually(30*time.Second, 100*time.Millisecond, stored) {
			sort.Ints(got)
			t.Errorf("%d points of the readings from seq 1 to %d, 300 ms apart: seqs %v; want each", len(got), want, got)
		}
	}, "run", "-c", site)
	if r.code != 0 {
		t.Errorf("run: exit %d\n%s", r.code, r.stderr.String())
	}
}
