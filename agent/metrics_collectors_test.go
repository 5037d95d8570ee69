package agent

import (
	"bytes"
	"flag"
	"fmt"
	"maps"
	"math"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/testutil"
	dto "github.com/prometheus/client_model/go"
	"github.com/prometheus/common/expfmt"
	"github.com/prometheus/common/model"

	"fieldlink/buffer"
	"fieldlink/buffer/cardstore"
	"fieldlink/fleet"
	"fieldlink/metrics"
	"fieldlink/packet"
	"fieldlink/selector"
	"fieldlink/sensors"
	"fieldlink/sensors/modbus"
	"fieldlink/status"
	"fieldlink/uplink"
)

var update = flag.Bool("update", false, "rewrite testdata/metrics.golden")

// now is the fake scrape time.
var scrapeAt = time.Date(2025, 3, 1, 12, 0, 0, 0, time.UTC)

// fakeSources returns sources with a distinct value in every field, so that
// a field read into the wrong metric shows in the golden file.
func fakeSources() status.Sources {
	return status.Sources{
		HeldBack:        func() uint64 { return 4321 },
		MetricsReadings: true,
		Readings: func(time.Time) []sensors.Reading {
			return []sensors.Reading{
				{Device: "ch4-1", Name: "CH4", Unit: "%VOL", Value: packet.Float(0.42, 2), Quality: sensors.Good},
				{Device: "ch4-1", Name: "Relay", Value: packet.Bool(true), Quality: sensors.Good},
				{Device: "ch4-1", Name: "Status", Value: packet.String("ok"), Quality: sensors.Good},
				{Device: "ch4-1", Name: "Drift", Value: packet.Float(math.NaN(), -1), Quality: sensors.Good},
				{Device: "wind", Name: "WindSpeed", Unit: "m/s", Value: packet.Float(3.5, 1), Quality: sensors.Stale},
				{Device: "co", Name: "CO", Unit: "ppm", Quality: sensors.Bad},
			}
		},
		Devices: func() []sensors.DeviceStatus {
			return []sensors.DeviceStatus{
				{Name: "ch4-1", Bus: "rs485-1", Health: sensors.OK, LastOK: scrapeAt.Add(-1500 * time.Millisecond),
					Polls: 101, Errors: 3, Requests: 202, Overruns: 1, LastDuration: 42 * time.Millisecond},
				{Name: "wind", Bus: "rs485-1", Health: sensors.Offline, LastError: "timeout",
					Polls: 17, Errors: 17, Requests: 17, LastDuration: 250 * time.Millisecond},
				{Name: "rain", Bus: "serial", Health: sensors.Degraded, LastOK: scrapeAt.Add(-time.Minute), Polls: 9, Errors: 2},
				{Name: "co", Bus: "plc", Health: sensors.Unknown},
			}
		},
		Buses: func() []sensors.BusSample {
			return []sensors.BusSample{{Name: "rs485-1", Busy: 1500 * time.Millisecond, Overruns: 4}, {Name: "plc"}}
		},
		Modbus: func() map[string]modbus.Stats {
			return map[string]modbus.Stats{"rs485-1": {
				Requests: 219, Responses: 205, BytesSent: 1752, BytesReceived: 4100, Discarded: 7,
				Timeouts: 11, CRCErrors: 2, Exceptions: 1, FrameErrors: 3, IOErrors: 4, Canceled: 5,
			}}
		},
		Buffer: func() (buffer.Stats, bool) {
			return buffer.Stats{
				Alarms: 2, Normal: 310, Leased: 64, Bytes: 98304, MaxBytes: 256 << 20, FileSize: 1 << 20,
				OldestSeq: 1000, OldestAt: scrapeAt.Add(-90 * time.Second), NewestSeq: 1311, LastSeq: 1311,
				Appends: 500, Acks: 188, Commits: 40, Fsyncs: 80,
				EvictedMaxBytes: 12, EvictedMaxAge: 13, RejectedFull: 14, Corrupt: 15, SalvageLost: 16,
				Salvages: 1, Compactions: 2, LostUncommitted: 17, DeadLetters: 18, DeadDropped: 19,
				DeadDepth: 3, DeadBytes: 900,
			}, true
		},
		Durability: func() cardstore.State {
			return cardstore.State{Durable: false, Fault: cardstore.ReadOnly, Words: "buffer not durable: the card is read-only", Volatile: 7}
		},
		Delivery: func() (uplink.DeliveryStats, bool) {
			return uplink.DeliveryStats{Delivered: 188, Retried: 6, DeadLettered: 1, Released: 21, InFlight: 2,
				Upstreams: []uplink.UpstreamCounters{
					{Name: "mqtt://a.example:1883", Picked: 30, Delivered: 150, Failed: 2},
					{Name: "https://b.example/ingest", Picked: 8, Delivered: 38, Failed: 5},
				}}, true
		},
		Upstreams: func() []selector.Stats {
			return []selector.Stats{
				{Name: "mqtt://a.example:1883", Index: 0, Up: true, Weight: 1, InFlight: 2, Requests: 32,
					Failures: 2, ConsecutiveFailures: 0, Timeouts: 1,
					LastLatency: 20 * time.Millisecond, LatencyEWMA: 25 * time.Millisecond, PeakEWMA: 40 * time.Millisecond,
					LatencyMean: 24 * time.Millisecond, LatencyStdDev: 5 * time.Millisecond, Samples: 32,
					LifetimeMean: 30 * time.Millisecond, LifetimeStdDev: 6 * time.Millisecond, LifetimeSamples: 32,
					LatencySum:        960 * time.Millisecond,
					LatencyCumulative: [12]uint64{0, 3, 10, 20, 28, 30, 31, 31, 32, 32, 32, 32},
					ProbeRTT:          3 * time.Millisecond, ProbeAge: 4 * time.Second, ProbeFailures: 1},
				{Name: "https://b.example/ingest", Index: 1, Up: false, Retired: true, Failures: 5,
					ConsecutiveFailures: 5, ProbeFailures: 9, ConsecutiveProbeFailures: 9},
			}
		},
		Selector:          func() string { return "p2c_peak_ewma" },
		SelectorFallbacks: func() uint64 { return 7 },
		Commands:          func() map[string]uint64 { return map[string]uint64{"rejected": 2, "done": 5} },
		Remote:            func() *fleet.Report { return &fleet.Report{Serial: 12, State: "reverted", Reason: "no upstream"} },
	}
}

// newTestCollector returns a gatherer over a collector of src at the fake
// scrape time. It parses the bytes the collector writes with the
// reference text parser, so every check below holds the exposition itself
// to the reference implementation, not a copy of its data structures.
func newTestCollector(src status.Sources) prometheus.Gatherer {
	cs := collectors(src)
	return prometheus.GathererFunc(func() ([]*dto.MetricFamily, error) {
		var buf bytes.Buffer
		werr := metrics.Write(&buf, scrapeAt, cs...)
		p := expfmt.NewTextParser(model.UTF8Validation)
		m, err := p.TextToMetricFamilies(&buf)
		if err != nil {
			return nil, fmt.Errorf("reference parser: %w", err)
		}
		names := slices.Sorted(maps.Keys(m))
		out := make([]*dto.MetricFamily, 0, len(names))
		for _, n := range names {
			out = append(out, m[n])
		}
		return out, werr
	})
}

// TestCollectorGolden checks every metric and value against
// testdata/metrics.golden; go test -update rewrites it.
func TestCollectorGolden(t *testing.T) {
	c := newTestCollector(fakeSources())
	golden := filepath.Join("testdata", "metrics.golden")
	if *update {
		var buf bytes.Buffer
		if err := metrics.Write(&buf, scrapeAt, collectors(fakeSources())...); err != nil {
			t.Fatal(err)
		}
		if err := os.WriteFile(golden, buf.Bytes(), 0o644); err != nil {
			t.Fatal(err)
		}
	}
	want, err := os.ReadFile(golden)
	if err != nil {
		t.Fatal(err)
	}
	if err := testutil.GatherAndCompare(c, bytes.NewReader(want)); err != nil {
		t.Fatal(err)
	}
}

// TestCollectorExposition holds the bytes the gateway's collectors write
// to testdata/metrics.golden exactly: family order, HELP and TYPE lines,
// label order and number formatting. TestCollectorGolden parses both sides
// and sorts the families, so it would not see a family moved or a label
// reordered.
func TestCollectorExposition(t *testing.T) {
	var got bytes.Buffer
	if err := metrics.Write(&got, scrapeAt, collectors(fakeSources())...); err != nil {
		t.Fatal(err)
	}
	want, err := os.ReadFile(filepath.Join("testdata", "metrics.golden"))
	if err != nil {
		t.Fatal(err)
	}
	if !bytes.Equal(got.Bytes(), want) {
		gl, wl := strings.Split(got.String(), "\n"), strings.Split(string(want), "\n")
		for i := range min(len(gl), len(wl)) {
			if gl[i] != wl[i] {
				t.Fatalf("exposition differs from testdata/metrics.golden at line %d:\ngot  %s\nwant %s", i+1, gl[i], wl[i])
			}
		}
		t.Fatalf("exposition has %d lines, testdata/metrics.golden %d", len(gl), len(wl))
	}
}

// TestCollectorValues spells out the values that need arithmetic, so that
// the golden file cannot bless a wrong one.
func TestCollectorValues(t *testing.T) {
	c := newTestCollector(fakeSources())
	for _, tc := range []struct {
		name, want string
	}{
		{"fieldlink_bus_busy_seconds_total", `
# HELP fieldlink_bus_busy_seconds_total Time the bus spent polling; its rate is the bus's utilisation, 0 to 1.
# TYPE fieldlink_bus_busy_seconds_total counter
fieldlink_bus_busy_seconds_total{bus="plc"} 0
fieldlink_bus_busy_seconds_total{bus="rs485-1"} 1.5
`},
		{"fieldlink_device_health", `
# HELP fieldlink_device_health Health of the device: 1 for its current state (unknown, ok, degraded, offline), 0 for the others.
# TYPE fieldlink_device_health gauge
fieldlink_device_health{bus="plc",device="co",state="degraded"} 0
fieldlink_device_health{bus="plc",device="co",state="offline"} 0
fieldlink_device_health{bus="plc",device="co",state="ok"} 0
fieldlink_device_health{bus="plc",device="co",state="unknown"} 1
fieldlink_device_health{bus="rs485-1",device="ch4-1",state="degraded"} 0
fieldlink_device_health{bus="rs485-1",device="ch4-1",state="offline"} 0
fieldlink_device_health{bus="rs485-1",device="ch4-1",state="ok"} 1
fieldlink_device_health{bus="rs485-1",device="ch4-1",state="unknown"} 0
fieldlink_device_health{bus="rs485-1",device="wind",state="degraded"} 0
fieldlink_device_health{bus="rs485-1",device="wind",state="offline"} 1
fieldlink_device_health{bus="rs485-1",device="wind",state="ok"} 0
fieldlink_device_health{bus="rs485-1",device="wind",state="unknown"} 0
fieldlink_device_health{bus="serial",device="rain",state="degraded"} 1
fieldlink_device_health{bus="serial",device="rain",state="offline"} 0
fieldlink_device_health{bus="serial",device="rain",state="ok"} 0
fieldlink_device_health{bus="serial",device="rain",state="unknown"} 0
`},
		{"fieldlink_device_last_success_timestamp_seconds", `
# HELP fieldlink_device_last_success_timestamp_seconds Unix time of the device's latest successful poll, 0 if none.
# TYPE fieldlink_device_last_success_timestamp_seconds gauge
fieldlink_device_last_success_timestamp_seconds{bus="plc",device="co"} 0
fieldlink_device_last_success_timestamp_seconds{bus="rs485-1",device="ch4-1"} 1.7408303985e+09
fieldlink_device_last_success_timestamp_seconds{bus="rs485-1",device="wind"} 0
fieldlink_device_last_success_timestamp_seconds{bus="serial",device="rain"} 1.74083034e+09
`},
		{"fieldlink_buffer_oldest_record_age_seconds", `
# HELP fieldlink_buffer_oldest_record_age_seconds Age of the reading of the oldest stored record, 0 when the buffer is empty.
# TYPE fieldlink_buffer_oldest_record_age_seconds gauge
fieldlink_buffer_oldest_record_age_seconds 90
`},
		{"fieldlink_upstream_latency_seconds", `
# HELP fieldlink_upstream_latency_seconds Delivery latency, send to acknowledgement, failures included.
# TYPE fieldlink_upstream_latency_seconds histogram
fieldlink_upstream_latency_seconds_bucket{upstream="mqtt://a.example:1883",le="0.005"} 0
fieldlink_upstream_latency_seconds_bucket{upstream="mqtt://a.example:1883",le="0.01"} 3
fieldlink_upstream_latency_seconds_bucket{upstream="mqtt://a.example:1883",le="0.025"} 10
fieldlink_upstream_latency_seconds_bucket{upstream="mqtt://a.example:1883",le="0.05"} 20
fieldlink_upstream_latency_seconds_bucket{upstream="mqtt://a.example:1883",le="0.1"} 28
fieldlink_upstream_latency_seconds_bucket{upstream="mqtt://a.example:1883",le="0.25"} 30
fieldlink_upstream_latency_seconds_bucket{upstream="mqtt://a.example:1883",le="0.5"} 31
fieldlink_upstream_latency_seconds_bucket{upstream="mqtt://a.example:1883",le="1"} 31
fieldlink_upstream_latency_seconds_bucket{upstream="mqtt://a.example:1883",le="2.5"} 32
fieldlink_upstream_latency_seconds_bucket{upstream="mqtt://a.example:1883",le="5"} 32
fieldlink_upstream_latency_seconds_bucket{upstream="mqtt://a.example:1883",le="10"} 32
fieldlink_upstream_latency_seconds_bucket{upstream="mqtt://a.example:1883",le="30"} 32
fieldlink_upstream_latency_seconds_bucket{upstream="mqtt://a.example:1883",le="+Inf"} 32
fieldlink_upstream_latency_seconds_sum{upstream="mqtt://a.example:1883"} 0.96
fieldlink_upstream_latency_seconds_count{upstream="mqtt://a.example:1883"} 32
fieldlink_upstream_latency_seconds_bucket{upstream="https://b.example/ingest",le="0.005"} 0
fieldlink_upstream_latency_seconds_bucket{upstream="https://b.example/ingest",le="0.01"} 0
fieldlink_upstream_latency_seconds_bucket{upstream="https://b.example/ingest",le="0.025"} 0
fieldlink_upstream_latency_seconds_bucket{upstream="https://b.example/ingest",le="0.05"} 0
fieldlink_upstream_latency_seconds_bucket{upstream="https://b.example/ingest",le="0.1"} 0
fieldlink_upstream_latency_seconds_bucket{upstream="https://b.example/ingest",le="0.25"} 0
fieldlink_upstream_latency_seconds_bucket{upstream="https://b.example/ingest",le="0.5"} 0
fieldlink_upstream_latency_seconds_bucket{upstream="https://b.example/ingest",le="1"} 0
fieldlink_upstream_latency_seconds_bucket{upstream="https://b.example/ingest",le="2.5"} 0
fieldlink_upstream_latency_seconds_bucket{upstream="https://b.example/ingest",le="5"} 0
fieldlink_upstream_latency_seconds_bucket{upstream="https://b.example/ingest",le="10"} 0
fieldlink_upstream_latency_seconds_bucket{upstream="https://b.example/ingest",le="30"} 0
fieldlink_upstream_latency_seconds_bucket{upstream="https://b.example/ingest",le="+Inf"} 0
fieldlink_upstream_latency_seconds_sum{upstream="https://b.example/ingest"} 0
fieldlink_upstream_latency_seconds_count{upstream="https://b.example/ingest"} 0
`},
		{"fieldlink_upstream_probe_rtt_seconds", `
# HELP fieldlink_upstream_probe_rtt_seconds Round-trip time of the upstream's latest successful probe.
# TYPE fieldlink_upstream_probe_rtt_seconds gauge
fieldlink_upstream_probe_rtt_seconds{upstream="mqtt://a.example:1883"} 0.003
`},
		{"fieldlink_modbus_errors_total", `
# HELP fieldlink_modbus_errors_total Failed Modbus exchanges by kind: timeout, crc, exception, frame (short or unexpected reply), io (the link failed).
# TYPE fieldlink_modbus_errors_total counter
fieldlink_modbus_errors_total{bus="rs485-1",kind="crc"} 2
fieldlink_modbus_errors_total{bus="rs485-1",kind="exception"} 1
fieldlink_modbus_errors_total{bus="rs485-1",kind="frame"} 3
fieldlink_modbus_errors_total{bus="rs485-1",kind="io"} 4
fieldlink_modbus_errors_total{bus="rs485-1",kind="timeout"} 11
`},
		{"fieldlink_buffer_evictions_total", `
# HELP fieldlink_buffer_evictions_total Records evicted by the buffer's policy, by reason (max_bytes, max_age), since the file was created.
# TYPE fieldlink_buffer_evictions_total counter
fieldlink_buffer_evictions_total{reason="max_age"} 13
fieldlink_buffer_evictions_total{reason="max_bytes"} 12
`},
		{"fieldlink_selector_info", `
# HELP fieldlink_selector_info The selection strategy in use, in the selector label; always 1.
# TYPE fieldlink_selector_info gauge
fieldlink_selector_info{selector="p2c_peak_ewma"} 1
`},
	} {
		t.Run(tc.name, func(t *testing.T) {
			if err := testutil.GatherAndCompare(c, strings.NewReader(tc.want), tc.name); err != nil {
				t.Error(err)
			}
		})
	}
}

// TestCollectorEveryDesc checks that with every source set, every described
// metric is emitted.
func TestCollectorEveryDesc(t *testing.T) {
	mfs, err := newTestCollector(fakeSources()).Gather()
	if err != nil {
		t.Fatal(err)
	}
	got := map[string]bool{}
	for _, mf := range mfs {
		got[mf.GetName()] = true
	}
	var all []*metrics.Desc
	for _, c := range collectors(status.Sources{}) {
		all = append(all, c.Families()...)
	}
	for _, d := range all {
		if !got[d.Name()] {
			t.Errorf("%s: not emitted", d.Name())
		}
	}
	if len(mfs) != len(all) {
		t.Errorf("gathered %d families, described %d", len(mfs), len(all))
	}
}

func TestCollectorLint(t *testing.T) {
	problems, err := testutil.GatherAndLint(newTestCollector(fakeSources()))
	if err != nil {
		t.Fatal(err)
	}
	for _, p := range problems {
		t.Errorf("%s: %s", p.Metric, p.Text)
	}
}

// TestCollectorPartialSources checks that missing sources leave out their
// metrics and nothing else.
func TestCollectorPartialSources(t *testing.T) {
	full := fakeSources()
	for _, tc := range []struct {
		name string
		src  status.Sources
		gone []string // families that must be absent
		kept []string // families that must be present
	}{
		{"nothing", status.Sources{}, []string{"fieldlink_device_polls_total", "fieldlink_buffer_bytes", "fieldlink_selector_info"}, nil},
		{"poll-only site", status.Sources{
			Devices: full.Devices, Buses: full.Buses, Modbus: full.Modbus,
			Buffer:   func() (buffer.Stats, bool) { return buffer.Stats{}, false },
			Delivery: func() (uplink.DeliveryStats, bool) { return uplink.DeliveryStats{}, false },
		}, []string{"fieldlink_buffer_bytes", "fieldlink_buffer_records", "fieldlink_delivery_retries_total", "fieldlink_upstream_picks_total", "fieldlink_selector_info"},
			[]string{"fieldlink_device_polls_total", "fieldlink_bus_busy_seconds_total", "fieldlink_modbus_requests_total"}},
		{"no samples yet", status.Sources{Upstreams: func() []selector.Stats { return []selector.Stats{{Name: "a", Up: true}} }},
			[]string{"fieldlink_upstream_latency_ewma_seconds", "fieldlink_upstream_latency_peak_ewma_seconds",
				"fieldlink_upstream_latency_stddev_seconds", "fieldlink_upstream_probe_rtt_seconds", "fieldlink_upstream_probe_age_seconds"},
			[]string{"fieldlink_upstream_up", "fieldlink_upstream_latency_seconds", "fieldlink_upstream_failures_total"}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			c := newTestCollector(tc.src)
			count := func(name string) int {
				t.Helper()
				n, err := testutil.GatherAndCount(c, name)
				if err != nil {
					t.Fatal(err)
				}
				return n
			}
			for _, n := range tc.gone {
				if got := count(n); got != 0 {
					t.Errorf("%s: %d series, want none", n, got)
				}
			}
			for _, n := range tc.kept {
				if got := count(n); got == 0 {
					t.Errorf("%s: no series", n)
				}
			}
		})
	}
}

func TestBufferEmptyAge(t *testing.T) {
	c := newTestCollector(status.Sources{Buffer: func() (buffer.Stats, bool) { return buffer.Stats{MaxBytes: 10}, true }})
	want := `
# HELP fieldlink_buffer_oldest_record_age_seconds Age of the reading of the oldest stored record, 0 when the buffer is empty.
# TYPE fieldlink_buffer_oldest_record_age_seconds gauge
fieldlink_buffer_oldest_record_age_seconds 0
`
	if err := testutil.GatherAndCompare(c, strings.NewReader(want), "fieldlink_buffer_oldest_record_age_seconds"); err != nil {
		t.Error(err)
	}
}

// TestCollectorBadLabel checks that a label value that is not UTF-8 fails
// its own series only.
func TestCollectorBadLabel(t *testing.T) {
	c := newTestCollector(status.Sources{
		Buses: func() []sensors.BusSample {
			return []sensors.BusSample{{Name: "bad\xff"}, {Name: "good", Busy: time.Second}}
		},
		Selector: func() string { return "rr" },
	})
	mfs, err := c.Gather()
	if err == nil {
		t.Error("Gather: no error for an invalid label value")
	}
	var names []string
	for _, mf := range mfs {
		for range mf.GetMetric() {
			names = append(names, mf.GetName())
		}
	}
	if want := []string{"fieldlink_bus_busy_seconds_total", "fieldlink_bus_overruns_total", "fieldlink_selector_info"}; strings.Join(names, ",") != strings.Join(want, ",") {
		t.Errorf("gathered %v, want %v", names, want)
	}
}
