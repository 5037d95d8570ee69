package status

import (
	"strings"
	"testing"
	"time"

	"fieldlink/internal/testtool"
	"fieldlink/metrics"
)

// An upstream whose ping answers but whose deliveries fail, 3 in a row or
// more, is failing, not up: in the snapshot, in status.json (which the
// schema takes) and in the page's errors-only view, which shows it.
func TestUpstreamFailingDeliveries(t *testing.T) {
	f := newFake()
	const name = "mqtt://one:1883"
	f.ups[0].ConsecutiveFailures, f.ups[0].Failures, f.ups[0].LastFailure = 11, 11, t0.Add(-time.Second)
	f.upErr[name] = `InfluxDB refused the write: database not found: "farmx" — create it first`
	now := t0
	s := server(f, &now)
	snap := s.Snapshot()
	if up := snap.Uplink.Upstreams[0]; up.Name != name || up.State != "failing" {
		t.Errorf("upstream %s answering its ping, 11 deliveries failed in a row: state %q, want failing", up.Name, up.State)
	}
	h := metrics.NewHandler(nil, metrics.HandlerOptions{Pages: s.Pages()})
	testtool.ValidStatus(t, []byte(body(t, get(t, h, "/status.json"))))
	page := body(t, get(t, h, "/?errors=1"))
	for _, row := range []string{`<tr class=" fine" data-upstream="` + name + `"`, `<tr class="uperr fine" data-upstream="` + name + `"`} {
		if strings.Contains(page, row) {
			t.Errorf("the errors-only view hides the failing upstream: %s", row)
		}
	}
	if !strings.Contains(page, "create it first") {
		t.Error("the page does not say why the upstream fails")
	}

	// Fewer failures in a row: a blip, still up.
	f.ups[0].ConsecutiveFailures = 2
	if up := server(f, &now).Snapshot().Uplink.Upstreams[0]; up.State != "up" {
		t.Errorf("2 failures in a row: state %q, want up", up.State)
	}
}
