package status

import (
	"fmt"
	"io"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"
	"time"

	"fieldlink/buffer"
	"fieldlink/buffer/cardstore"
	"fieldlink/packet"
	"fieldlink/selector"
	"fieldlink/sensors"
	"fieldlink/sensors/modbus"
	"fieldlink/uplink"
)

var t0 = time.Date(2026, 11, 30, 8, 0, 0, 0, time.UTC)

// fake is a site's snapshots, set by each test.
type fake struct {
	devs      []sensors.DeviceStatus
	readings  []sensors.Reading
	busy      map[string]time.Duration
	delivered map[string]uint64
	ups       []selector.Stats
	site      GatewayIdentity
	downlink  *DownlinkStatus
	buf       buffer.Stats
	durable   *cardstore.State // nil: no durability source
	// upErr is each upstream's last error in words, at t0 - 5 s;
	// lastDelivered when an upstream last acknowledged a batch.
	upErr         map[string]string
	lastDelivered time.Time
	// upDown and upFailing are when an upstream went down, or began to
	// fail its deliveries.
	upDown, upFailing map[string]time.Time
}

func (f *fake) sources() Sources {
	src := Sources{
		Devices:  func() []sensors.DeviceStatus { return f.devs },
		Readings: func(time.Time) []sensors.Reading { return f.readings },
		Buses: func() []sensors.BusSample {
			var out []sensors.BusSample
			for _, name := range []string{"a", "b"} {
				out = append(out, sensors.BusSample{Name: name, Busy: f.busy[name]})
			}
			return out
		},
		Modbus: func() map[string]modbus.Stats {
			return map[string]modbus.Stats{"a": {Requests: 10, Timeouts: 1, CRCErrors: 2, Exceptions: 3, FrameErrors: 4, IOErrors: 5}}
		},
		Buffer: func() (buffer.Stats, bool) { return f.buf, true },
		Delivery: func() (uplink.DeliveryStats, bool) {
			st := uplink.DeliveryStats{LastDelivered: f.lastDelivered}
			for _, name := range []string{"mqtt://one:1883", "mqtt://two:1883"} {
				u := uplink.UpstreamCounters{Name: name, Delivered: f.delivered[name]}
				u.DownSince, u.FailingSince = f.upDown[name], f.upFailing[name]
				if e := f.upErr[name]; e != "" {
					u.LastError, u.LastErrorAt = e, t0.Add(-5*time.Second)
				}
				st.Upstreams = append(st.Upstreams, u)
				st.Delivered += f.delivered[name]
			}
			return st, true
		},
		Upstreams: func() []selector.Stats { return f.ups },
		Selector:  func() string { return "drf_cswlc" },
		Identity:  func() GatewayIdentity { return f.site },
		Disk:      func() (DiskSpace, bool) { return DiskSpace{Free: 5 << 30, Total: 8 << 30}, true },
	}
	if f.downlink != nil {
		src.Downlink = func() DownlinkStatus { return *f.downlink }
	}
	if f.durable != nil {
		src.Durability = func() cardstore.State { return *f.durable }
	}
	return src
}

func newFake() *fake {
	return &fake{
		devs: []sensors.DeviceStatus{
			{Name: "ch4-1", Bus: "a", Health: sensors.OK, Polls: 10, LastOK: t0.Add(-time.Second), LastDuration: 20 * time.Millisecond},
			{Name: "co-1", Bus: "a", Health: sensors.Offline, Polls: 10, Errors: 4, ConsecutiveFailures: 4, LastError: "timeout", LastOK: t0.Add(-time.Minute)},
			{Name: "sonic-1", Bus: "serial", Health: sensors.Unknown},
		},
		readings: []sensors.Reading{
			{Device: "ch4-1", Name: "CH4", Unit: "%VOL", Value: packet.Float(0.42, 2), At: t0.Add(-time.Second), Raw: []byte{0, 42}, Quality: sensors.Good},
			{Device: "co-1", Name: "CO", Unit: "ppm", Value: packet.Float(0, 1), At: t0.Add(-time.Minute), Raw: []byte{0, 0}, Quality: sensors.Bad},
			{Device: "sonic-1", Name: "WindSpeed", Unit: "m/s", Quality: sensors.Bad},
		},
		busy:      map[string]time.Duration{},
		delivered: map[string]uint64{},
		buf:       buffer.Stats{Normal: 7, Alarms: 1, OldestSeq: 3, OldestAt: t0.Add(-time.Minute), Bytes: 100, MaxBytes: 1000},
		upErr:     map[string]string{},
		// Delivered a moment ago: the buffer's minute-old packets are not
		// a stall.
		lastDelivered: t0.Add(-time.Second),
		ups: []selector.Stats{
			{Name: "mqtt://one:1883", Up: true, Samples: 3, LatencyMean: 40 * time.Millisecond},
			{Name: "mqtt://two:1883", ConsecutiveFailures: 2, LastFailure: t0.Add(-time.Second), LastTimeout: t0.Add(-time.Second)},
		},
		site: GatewayIdentity{SiteID: "M1", GatewayID: "gw-1", Version: "v1.2.3", Started: t0.Add(-time.Hour),
			ConfigFile: "/etc/fieldlink/site.yaml", ConfigSHA256: strings.Repeat("ab", 32), OnDiskSHA256: strings.Repeat("ab", 32)},
	}
}

// server is a Server over f at a clock the test moves.
func server(f *fake, now *time.Time) *Server {
	return New(f.sources(), Options{
		Now:   func() time.Time { return *now },
		Clock: func(now time.Time) Clock { return Clock{Now: now, Synchronised: ptr(true), MaxErrorSecond: ptr(0.01)} },
	})
}

func get(t *testing.T, h http.Handler, path string, header ...string) *http.Response {
	t.Helper()
	r := httptest.NewRequest(http.MethodGet, path, nil)
	r.RemoteAddr = "127.0.0.1:1"
	for i := 0; i+1 < len(header); i += 2 {
		r.Header.Set(header[i], header[i+1])
	}
	w := httptest.NewRecorder()
	h.ServeHTTP(w, r)
	return w.Result()
}

func body(t *testing.T, resp *http.Response) string {
	t.Helper()
	b, err := io.ReadAll(resp.Body)
	if err != nil {
		t.Fatal(err)
	}
	return string(b)
}

func deref[T any](p *T) any {
	if p == nil {
		return nil
	}
	return *p
}

// fifty is a site of 50 devices of 5 points each on 5 buses, some failing.
func fifty() *fake {
	f := newFake()
	f.devs, f.readings = nil, nil
	for i := range 50 {
		name := fmt.Sprintf("gas-%02d", i)
		bus := []string{"a", "b"}[i%2]
		d := sensors.DeviceStatus{Name: name, Bus: bus, Health: sensors.OK, Polls: 1000, LastOK: t0, LastDuration: 30 * time.Millisecond}
		q := sensors.Good
		if i%10 == 3 {
			d.Health, d.ConsecutiveFailures, d.LastError, q = sensors.Offline, 5, fmt.Sprintf("device %s (slave %d on bus %s): read holding 0+10: modbus: no reply before the deadline (timeout)", name, i+1, bus), sensors.Bad
		}
		f.devs = append(f.devs, d)
		for j, p := range []string{"CH4", "CO", "O2", "H2S", "Temperature"} {
			f.readings = append(f.readings, sensors.Reading{Device: name, Name: p, Unit: "ppm", Value: packet.Float(float64(i*j)/10, 1), At: t0, Raw: []byte{0, byte(i * j)}, Quality: q})
		}
	}
	return f
}
