package loopback

import (
	"fmt"
	"log/slog"
	"os"
	"strings"
	"testing"
	"time"

	toxiproxy "github.com/Shopify/toxiproxy/v2"
	"github.com/rs/zerolog"

	"fieldlink/internal/testtool"
	"fieldlink/selector"
	"fieldlink/uplink"
)

// newMQTTRig starts n mosquitto brokers and their proxies, stopped when the
// test ends. A missing mosquitto skips the test, or fails it under CI.
func newMQTTRig(t *testing.T, n int) *rig {
	t.Helper()
	bin := testtool.FindMosquitto(t)
	r := &rig{t: t, dir: t.TempDir(), dial: dialMQTT}
	api := toxiproxy.NewServer(toxiproxy.NewMetricsContainer(nil), zerolog.Nop())
	for i := range n {
		// Each broker's Cleanup runs after its proxy's.
		r.proxy(api, i, testtool.NewMosquitto(t, bin).Addr())
	}
	return r
}

// dialMQTT is the gateway side of a broker as the gateway's pool wires it:
// an MQTT connection (QoS 1, the gateway's window of 64, a publish timeout
// of plan.timeout) kept up by its Run, an MQTTSender, and a TCP prober
// (or, with plan.publishProbe, an MQTT publish prober) that feeds
// Table.Probe and, when the broker answers while the connection is down,
// kicks a reconnect.
func dialMQTT(r *rig, i int, table *selector.Table, _ string, plan blockPlan) endpoint {
	t := r.t
	t.Helper()
	p := r.proxies[i]
	m, err := uplink.NewMQTT(uplink.MQTTConfig{
		URL: "mqtt://" + p.Listen, PublishTimeout: plan.timeout,
		Logger: slog.New(slog.DiscardHandler),
		Vars:   map[string]string{"site": "001", "gateway": "gw-loopback"},
	})
	if err != nil {
		t.Fatal(err)
	}
	ms := uplink.NewMQTTSender(m, 64)
	report := func(rtt time.Duration, err error) {
		table.Probe(i, rtt, err)
		if err == nil && !m.Connected() {
			m.Kick()
		}
	}
	var pr *uplink.Prober
	if plan.publishProbe {
		pr = uplink.NewMQTTProber(m, "fieldlink/001/gw-loopback/probe", plan.probeEvery, 500*time.Millisecond, report)
	} else {
		target, err := uplink.ProbeTarget("mqtt://" + p.Listen)
		if err != nil {
			t.Fatal(err)
		}
		pr = uplink.NewProber(target, plan.probeEvery, 500*time.Millisecond, nil, report)
	}
	return endpoint{sender: ms, prober: pr, run: m.Run, close: func() {}}
}

// healthy3 are the round trips of three healthy brokers.
var healthy3 = []time.Duration{1 * time.Millisecond, 2 * time.Millisecond, 3 * time.Millisecond}

// mqttScenarios are the MQTT case's: the slow broker, the black hole, the
// broker that refuses connections and the broker that joins cold, each
// mirroring the same lab scenario as over HTTP. Broker 2 is the faulty
// one, or the joiner.
var mqttScenarios = []scenario{
	{
		lab:   "S2",
		title: fmt.Sprintf("slow broker: broker 2's PUBACKs come %v late during the fault (others 1–3 ms)", slowBy),
		base:  healthy3,
		fault: func(r *rig, on bool) {
			d := healthy3[2]
			if on {
				d += slowBy
			}
			r.setLatency(2, d)
		},
		faulty: 2,
	},
	{
		lab:    "S4c",
		title:  "black hole: broker 2's proxy accepts and never answers during the fault (others 1–3 ms)",
		base:   healthy3,
		fault:  func(r *rig, on bool) { r.setBlackHole(2, on) },
		faulty: 2,
	},
	{
		lab:    "S4a",
		title:  "refused: broker 2's proxy stopped during the fault, its connection closed and new ones refused (others 1–3 ms)",
		base:   healthy3,
		fault:  func(r *rig, on bool) { r.setDown(2, on) },
		faulty: 2,
	},
	{
		lab:    "S7",
		title:  "cold join: broker 2 enters the table (Table.Add, Delivery.Add) and connects when the fault window starts (all 1–3 ms)",
		base:   healthy3,
		faulty: 2,
		join:   true,
	},
}

// TestLoopbackMQTTAgreesWithLab is TestLoopbackAgreesWithLab over MQTT:
// three mosquitto brokers behind toxiproxy, QoS 1 publishes acked by their
// PUBACKs, and the four default strategies in both modes.
func TestLoopbackMQTTAgreesWithLab(t *testing.T) {
	md := modeOf(t)
	md.strategies = shortMode.strategies
	tier := runTier(t, md, mqttScenarios, func() *rig { return newMQTTRig(t, len(healthy3)) })
	t.Logf("lab %v, loopback %v, %d sends\n%s\n%d of %d clear lab orderings agree", tier.simTook.Round(time.Second),
		tier.loopTook.Round(time.Second), tier.sends, tier.tables, tier.agreed, tier.checked)
	if *update {
		path := docPath()
		old, err := os.ReadFile(path)
		if err != nil {
			t.Fatal(err)
		}
		doc := strings.TrimSuffix(string(old), mqttSectionOf(string(old))) + renderMQTTSection(md, tier)
		if err := os.WriteFile(path, []byte(doc), 0o644); err != nil {
			t.Fatal(err)
		}
		t.Logf("wrote %s", path)
	}
}

// mqttMark opens the MQTT section of docs/selector-loopback.md, its last,
// after a blank line; each test rewrites its own part and keeps the other.
const mqttMark = "\n<!-- The MQTT case: written by TestLoopbackMQTTAgreesWithLab -update. -->\n"

// mqttSectionOf is doc's MQTT section, from its mark to the end, or "".
func mqttSectionOf(doc string) string {
	if i := strings.Index(doc, mqttMark); i >= 0 {
		return doc[i:]
	}
	return ""
}

// renderMQTTSection is the MQTT section of docs/selector-loopback.md.
func renderMQTTSection(md mode, tr tier) string {
	var w strings.Builder
	p := md.plan
	w.WriteString(mqttMark)
	fmt.Fprintf(&w, `
## MQTT: three mosquitto brokers

Generated by `+"`LOOPBACK_LONG=1 go test -count=1 -run TestLoopbackMQTTAgreesWithLab -timeout 60m ./tests/loopback/ -update`"+`.

The same check over MQTT: three mosquitto brokers on 127.0.0.1, each
behind an in-process toxiproxy proxy, and the gateway's own uplink.MQTT
(QoS 1, a publish acked by its PUBACK, window 64, publish timeout %v,
reconnects by its own loop) and uplink.MQTTSender, one packet per
publish, with the pool's TCP probers (a probe that answers while the
connection is down kicks a reconnect). Broker 2 is the faulty one, or
the joiner. The lab runs its own scenarios unchanged (four servers).

Run: %d strategies, %d rounds alternated, blocks of %v warm-up then %v of
fault, %.0f packets/s, probes every %v; lab %d seeds. Lab %v, loopback %v.

**Verdict: %d of %d clear lab orderings agree.**
`, p.timeout, len(md.strategies), md.rounds, p.warmup, p.fault, p.rate, p.probeEvery, md.seeds,
		tr.simTook.Round(time.Second), tr.loopTook.Round(time.Second), tr.agreed, tr.checked)
	// One heading level below the section's.
	w.WriteString(strings.ReplaceAll(tr.tables, "\n### ", "\n#### "))
	return w.String()
}

// TestMQTTSection checks that each test's -update keeps the other's part
// of the document.
func TestMQTTSection(t *testing.T) {
	http := "# Selector loopback tier\n\nHTTP tables.\n"
	mqtt := mqttMark + "\n## MQTT\n\nMQTT tables.\n"
	doc := http + mqtt
	if got := mqttSectionOf(doc); got != mqtt {
		t.Errorf("mqttSectionOf = %q, want %q", got, mqtt)
	}
	if got := mqttSectionOf(http); got != "" {
		t.Errorf("mqttSectionOf(no section) = %q", got)
	}
	if got := strings.TrimSuffix(doc, mqttSectionOf(doc)); got != http {
		t.Errorf("the HTTP part = %q, want %q", got, http)
	}
}
