package agent

import (
	"crypto/sha256"
	"encoding/hex"
	"fmt"
	"math"
	"strings"
	"sync"
	"testing"
	"time"

	"fieldlink/downlink"
	"fieldlink/internal/testtool"
	"fieldlink/internal/testtool/emutest"
	"fieldlink/sensors/emulator"
	"fieldlink/sparkplug"
)

// spbID is the command id the gateway gives metric i of a DCMD (-1: the
// DCMD whole).
func spbID(payload []byte, device string, i int) string {
	h := sha256.New()
	h.Write(payload)
	fmt.Fprintf(h, "\x00%s\x00%d", device, i)
	return "spb-" + hex.EncodeToString(h.Sum(nil)[:16])
}

// Every DCMD the gateway refuses gets a rejected result and an audit
// entry, like any command refused: one of more metrics than the bound
// (refused whole: not one write), a metric by an alias of no point, a
// DCMD without a timestamp, a String value, NaN and infinity.
func TestSparkplugDCMDRefusals(t *testing.T) {
	b := testtool.NewMosquitto(t, testtool.FindMosquitto(t))
	frames := &frameLog{frames: map[byte][]string{}}
	_, addr := emutest.ServeDevices(t, false, emutest.Devices(t, "generic-irrigation-valve"), emulator.Options{Seed: 1, OnRequest: frames.on})
	var mu sync.Mutex
	born := false
	host := newPlatform(t, b.Addr())
	platformSubscribe(t, host, "spBv1.0/farm/DBIRTH/#", func(string, []byte) {
		mu.Lock()
		born = true
		mu.Unlock()
	})
	_, g, _ := startSparkplugGateway(t, "gw-dl", addr, true, "group_id: farm", b.URL())
	testtool.WaitFor(t, 15*time.Second, "the DBIRTH", func() bool { mu.Lock(); defer mu.Unlock(); return born })
	now := uint64(time.Now().UnixMilli())
	send := func(p sparkplug.Payload) []byte {
		t.Helper()
		b := p.Marshal()
		host.c.Publish(t, "spBv1.0/farm/DCMD/gw-dl/valve-1", b, false)
		return b
	}

	// 200 alternating ValveOpen values in one DCMD of 3.4 KB.
	var flips []sparkplug.Metric
	for i := range 200 {
		flips = append(flips, sparkplug.Metric{Name: "ValveOpen", Type: sparkplug.Boolean, Value: sparkplug.BoolOf(i%2 == 0)})
	}
	p := send(sparkplug.Payload{Timestamp: now, HasSeq: true, Metrics: flips})
	if res := host.result(t, spbID(p, "valve-1", -1)); res.Status != downlink.StatusRejected || !strings.Contains(res.Reason, "200 metrics") {
		t.Errorf("a DCMD of 200 metrics: %+v, want rejected whole", res)
	}

	for _, tc := range []struct {
		name   string
		p      sparkplug.Payload
		reason string
	}{
		{"an alias of no point", sparkplug.Payload{Timestamp: now + 1, HasSeq: true,
			Metrics: []sparkplug.Metric{{Alias: 9999, HasAlias: true, Type: sparkplug.Boolean, Value: sparkplug.BoolOf(true)}}}, "alias 9999"},
		{"no timestamp", sparkplug.Payload{HasSeq: true,
			Metrics: []sparkplug.Metric{{Name: "ValveOpen", Type: sparkplug.Boolean, Value: sparkplug.BoolOf(true)}}}, "no timestamp"},
		{"a String", sparkplug.Payload{Timestamp: now + 2, HasSeq: true,
			Metrics: []sparkplug.Metric{{Name: "Setpoint", Type: sparkplug.String, Value: sparkplug.StringOf("12")}}}, "not a number or a boolean"},
		{"NaN", sparkplug.Payload{Timestamp: now + 3, HasSeq: true,
			Metrics: []sparkplug.Metric{{Name: "Setpoint", Type: sparkplug.Double, Value: sparkplug.DoubleOf(math.NaN())}}}, "NaN"},
		{"+Inf", sparkplug.Payload{Timestamp: now + 4, HasSeq: true,
			Metrics: []sparkplug.Metric{{Name: "Setpoint", Type: sparkplug.Double, Value: sparkplug.DoubleOf(math.Inf(1))}}}, "Inf"},
	} {
		p := send(tc.p)
		if res := host.result(t, spbID(p, "valve-1", 0)); res.Status != downlink.StatusRejected || !strings.Contains(res.Reason, tc.reason) {
			t.Errorf("%s: %+v, want rejected saying %q", tc.name, res, tc.reason)
		}
	}
	if got := frames.of(1); len(got) != 0 {
		t.Errorf("the valve received %d writes, want none", len(got))
	}
	// Audited: each refusal is in the engine's record of results, which
	// the audit entry precedes.
	if n := g.Commands().Counts()[downlink.StatusRejected]; n < 6 {
		t.Errorf("%d rejections counted, want 6", n)
	}
}
