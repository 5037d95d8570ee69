package main

// End-to-end tests of `gateway run`: the real command, in-process, polling
// the project's emulator, buffering in a bbolt file and delivering to three
// real mosquitto brokers through fault-injecting proxies, or to httptest
// servers. What they prove is written on each test.

import (
	"fmt"
	"net/http"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"fieldlink/internal/testtool"
	"fieldlink/internal/testtool/brokertest"
)

// e2eWindow is the site's uplink.window: the most publishes awaiting a
// PUBACK per broker, hence the most duplicates one cut link can cause.
const e2eWindow = 16

// e2eDevices are the end-to-end tests' devices, slaves 1 to 4 of the
// emulator, polled every 100ms.
var e2eDevices = []string{
	"{name: wind-1, profile: generic-wind-speed, slave: 1, interval: 100ms}",
	"{name: weather-1, profile: renke-rs-ws-n01, slave: 2, interval: 100ms}",
	"{name: rain-1, profile: generic-tipping-bucket-rain, slave: 3, interval: 100ms}",
	"{name: light-1, profile: dfrobot-sen0644, slave: 4, interval: 100ms}",
}

// e2eSite is an end-to-end site: the first n of e2eDevices on the emulator
// at emuAddr, the uplink's settings, a fast probe and the upstreams' URLs.
func e2eSite(site, gateway, emuAddr, bufPath string, n int, uplink []string, urls ...string) testtool.SiteFile {
	s := testtool.SiteFile{
		Site: site, Gateway: gateway, Buffer: bufPath, Bus: "tcp://" + emuAddr, Timeout: "500ms",
		Devices: e2eDevices[:n],
		Uplink:  append(uplink, "probe: {interval: 200ms, timeout: 100ms}", "upstreams:"),
	}
	for _, u := range urls {
		s.Uplink = append(s.Uplink, fmt.Sprintf("  - {url: %q}", u))
	}
	return s
}

// TestE2EThreeBrokersLatencyOutagesRecovery runs `gateway run` against three
// mosquitto brokers, each behind its own proxy, and a subscriber connected
// straight to each broker:
//
//  1. healthy: every broker receives packets;
//  2. a second of latency on broker A's link: A's share of new packets falls
//     well below a third (p2c_ewma moves traffic away from it);
//  3. B's link cut: B receives none of the packets of the phase, A and C
//     get all of them;
//  4. every link cut: the emulator goes on producing, no broker receives
//     anything, the packets wait in the buffer;
//  5. links back: the backlog drains;
//  6. after stop: every Seq from 1 to the last stored reached a broker or is
//     still in the buffer (none missing), and duplicates stay within
//     window × cut links.
func TestE2EThreeBrokersLatencyOutagesRecovery(t *testing.T) {
	mosq := testtool.FindMosquitto(t)
	start := time.Now()

	_, emuAddr := serve(t, false, "generic-wind-speed", "renke-rs-ws-n01", "generic-tipping-bucket-rain", "dfrobot-sen0644")
	names := []string{"A", "B", "C"}
	led := newE2ELedger(len(names))
	links := make([]*brokertest.Proxy, len(names))
	var ups []string
	for i, name := range names {
		broker := testtool.StartMosquitto(t, mosq)
		e2eSubscribe(t, broker, name, func(topic string, payload []byte) { led.received(i, topic, payload) }, led.problem)
		links[i] = brokertest.NewProxy(t, name, broker)
		ups = append(ups, "mqtt://"+links[i].Addr())
	}
	dir := t.TempDir()
	bufPath := filepath.Join(dir, "buf.db")
	site := e2eSite(`{id: "E2E", id_field: FarmId}`, "gw-e2e", emuAddr, bufPath, 4,
		[]string{"selector: p2c_ewma", fmt.Sprintf("window: %d", e2eWindow)}, ups...).Write(t, "")

	g := e2eStartGateway(t, site, &e2eLineWriter{fn: led.stored}, "info")

	// A phase's packets are those printed as stored more than settle after
	// its fault began. The gateway prints a packet after the commit that
	// stores it, so one printed earlier may have been committed, and sent
	// through the link, before the fault.
	const settle = 500 * time.Millisecond
	// Each phase lets the emulator produce this many packets (30 to 40 a
	// second) past its settling time.
	const phasePackets = 60
	produce := func(what string, from uint64, n uint64) uint64 {
		t.Helper()
		testtool.WaitFor(t, 30*time.Second, what, func() bool { return led.maxStored() >= from+n })
		return led.maxStored()
	}
	cutAt := func(at time.Time) uint64 {
		t.Helper()
		testtool.WaitFor(t, 10*time.Second, "the settling time to pass", func() bool { return time.Since(at) > settle })
		return led.maxStoredBy(at.Add(settle))
	}
	delivered := func(what string, lo, hi uint64, brokers ...int) {
		t.Helper()
		var miss []uint64
		if !testtool.Eventually(30*time.Second, 10*time.Millisecond, func() bool {
			miss = led.missing(lo, hi, brokers...)
			return len(miss) == 0
		}) {
			t.Fatalf("%s: %d of seqs %d..%d never arrived: %v", what, len(miss), lo+1, hi, e2eHead(miss, 20))
		}
	}

	// 1. Healthy: every broker gets traffic.
	testtool.WaitFor(t, 30*time.Second, "every broker to receive packets", func() bool {
		for i := range names {
			if led.countOn(i, 0, led.maxStored()) < 5 {
				return false
			}
		}
		return true
	})
	end1 := led.maxStored()
	delivered("healthy", 0, end1, 0, 1, 2)
	t.Logf("phase 1 healthy: seqs 1..%d, A/B/C %s, %.0f packets/s", end1, led.shares(0, end1), float64(end1)/time.Since(start).Seconds())

	// 2. Latency on A: its share of new packets drops. p2c_ewma's cost is
	// a peak EWMA: one slow ack sets it, and it decays over seconds (τ
	// 10 s). A's latency must therefore stand clear of the stalls a loaded
	// machine gives B's and C's acks: with 200 ms on A, one stall of 600
	// ms on B's acks just before the phase let A take 27% of it (28% was
	// seen under load). The phase starts once an ack that A's latency held
	// back could have told the selector.
	const latency = time.Second
	at := time.Now()
	links[0].AddToxic(fmt.Sprintf(`{"name":"latency_downstream","type":"latency","stream":"downstream","attributes":{"latency":%d}}`, latency.Milliseconds()))
	lo2 := cutAt(at.Add(latency))
	hi2 := produce("packets during the latency phase", lo2, 2*phasePackets)
	delivered("latency on A", lo2, hi2, 0, 1, 2)
	a, b, c := led.countOn(0, lo2, hi2), led.countOn(1, lo2, hi2), led.countOn(2, lo2, hi2)
	t.Logf("phase 2 latency %v on A: seqs %d..%d, A/B/C %s", latency, lo2+1, hi2, led.shares(lo2, hi2))
	if share := float64(a) / float64(hi2-lo2); share >= 0.15 {
		t.Errorf("with %v of latency A still took %.0f%% of the packets (%d of %d); want < 15%%", latency, 100*share, a, hi2-lo2)
	}
	if b == 0 || c == 0 {
		t.Errorf("B and C should share the traffic A lost: B %d, C %d", b, c)
	}
	links[0].Reset()

	// 3. B's link cut: A and C take everything, B gets nothing new.
	at = time.Now()
	links[1].Down()
	lo3 := cutAt(at)
	hi3 := produce("packets during B's outage", lo3, phasePackets)
	delivered("B down", lo3, hi3, 0, 2)
	if n := led.countOn(1, lo3, hi3); n != 0 {
		t.Errorf("B's link is down, yet B received %d of seqs %d..%d", n, lo3+1, hi3)
	}
	t.Logf("phase 3 B down: seqs %d..%d, A/B/C %s", lo3+1, hi3, led.shares(lo3, hi3))

	// 4. Every link cut: the packets stay in the buffer. A running gateway
	// shows no queue depth (its bbolt file is locked), so the depth is
	// what was stored and not delivered.
	at = time.Now()
	links[0].Down()
	links[2].Down()
	lo4 := cutAt(at)
	hi4 := produce("packets during the total outage", lo4, phasePackets)
	if n := led.receiptsAfter(lo4); n != 0 {
		t.Errorf("every link is down, yet seqs after %d arrived %d times", lo4, n)
	}
	t.Logf("phase 4 all down: seqs %d..%d produced, none delivered: %d packets wait in the buffer", lo4+1, hi4, hi4-lo4)

	// 5. Recovery: the backlog drains.
	at = time.Now()
	for _, l := range links {
		l.Up()
	}
	hi5 := led.maxStored()
	delivered("recovery", 0, hi5, 0, 1, 2)
	drain := time.Since(at)
	// Then the live packets catch up: at some moment every seq stored so
	// far has arrived.
	testtool.WaitFor(t, 30*time.Second, "the live packets to catch up", func() bool {
		return len(led.missing(hi5, led.maxStored(), 0, 1, 2)) == 0
	})
	t.Logf("phase 5 recovery: backlog up to seq %d delivered %v after the links came back, caught up after %v; A/B/C of the outage %s",
		hi5, drain.Round(time.Millisecond), time.Since(at).Round(time.Millisecond), led.shares(lo4, hi4))

	// 6. Stop, then account for every seq.
	if err := g.stop(t); err != nil {
		t.Fatalf("gateway run: %v\n%s", err, g.stderr.String())
	}
	left, dead, st := e2eLeftInBuffer(t, bufPath)
	if len(dead) > 0 {
		t.Errorf("%d packets dead-lettered; a broker refuses none", len(dead))
	}
	rep := led.account(left)
	if st.LastSeq != rep.maxSeq {
		t.Errorf("the buffer's last seq is %d, the gateway printed up to %d", st.LastSeq, rep.maxSeq)
	}
	bound := e2eWindow * 3 // three links were cut once each
	t.Logf("produced %d, delivered %d (%d receipts), left in buffer %d, missing %d, duplicates %d (bound %d), longest delay %v, run %v",
		rep.maxSeq, rep.distinct, rep.receipts, len(left), len(rep.missing), rep.receipts-rep.distinct, bound,
		rep.longest.Round(time.Millisecond), time.Since(start).Round(time.Millisecond))
	if len(rep.dups) > 0 {
		t.Logf("duplicates (seq×receipts@brokers): %s", strings.Join(e2eHead(rep.dups, 50), " "))
	}
	for _, p := range rep.problems {
		t.Error(p)
	}
	if len(rep.missing) > 0 {
		t.Errorf("%d seqs lost (neither delivered nor in the buffer): %v", len(rep.missing), e2eHead(rep.missing, 50))
	}
	if d := rep.receipts - rep.distinct; d > bound {
		t.Errorf("%d duplicates, more than window × cut links = %d", d, bound)
	}
	if rep.minSeq != 1 {
		t.Errorf("the first seq stored is %d, want 1", rep.minSeq)
	}
}

// TestHTTPDeadLettersAndRetries runs `gateway run` with two HTTP upstreams
// picked in turn. A 500 is a failure of the upstream: the batch is retried
// on the other one and every packet arrives there. A 422 is a refusal of
// the packet: it is dead-lettered (logged, moved out of the queue into the
// buffer's dead letters, with the reason) and not sent anywhere else.
func TestHTTPDeadLettersAndRetries(t *testing.T) {
	_, emuAddr := serve(t, false, "generic-wind-speed", "renke-rs-ws-n01", "generic-tipping-bucket-rain")
	siteFor := func(bufPath string, urls ...string) string {
		return e2eSite(`{id: "H1", id_field: FarmId}`, "gw-http", emuAddr, bufPath, 3,
			[]string{"selector: round_robin", "batch: 10"}, urls...).Write(t, "")
	}

	t.Run("500 is retried elsewhere", func(t *testing.T) {
		bad, good := e2eNewIngest(t, http.StatusInternalServerError), e2eNewIngest(t, http.StatusOK)
		bufPath := filepath.Join(t.TempDir(), "buf.db")
		led := newE2ELedger(0)
		g := e2eStartGateway(t, siteFor(bufPath, bad.URL, good.URL), &e2eLineWriter{fn: led.stored}, "warn")
		testtool.WaitFor(t, 30*time.Second, "the 500 upstream to be tried and 40 packets to arrive", func() bool {
			return bad.requests() >= 3 && len(good.seqs()) >= 40
		})
		if err := g.stop(t); err != nil {
			t.Fatalf("gateway run: %v", err)
		}
		left, deadLetters, _ := e2eLeftInBuffer(t, bufPath)
		if len(deadLetters) > 0 {
			t.Errorf("a 500 must not dead-letter, yet %d dead letters", len(deadLetters))
		}
		got := good.seqs()
		stored := led.storedSeqs()
		var lost []uint64
		for _, s := range stored {
			if got[s] == 0 && !left[s] {
				lost = append(lost, s)
			}
		}
		for s := range bad.seqs() {
			if got[s] == 0 && !left[s] {
				lost = append(lost, s)
			}
		}
		if len(lost) > 0 {
			t.Errorf("%d packets neither at the 200 upstream nor in the buffer: %v", len(lost), e2eHead(lost, 30))
		}
		if !strings.Contains(g.stderr.String(), "delivery failed") {
			t.Errorf("no \"delivery failed\" logged for the 500s:\n%s", g.stderr.String())
		}
		if strings.Contains(g.stderr.String(), "dead-lettered") {
			t.Errorf("a 500 must not dead-letter:\n%s", g.stderr.String())
		}
		t.Logf("stored %d, 500 upstream: %d requests (%d packets), 200 upstream: %d packets, left in buffer %d",
			len(stored), bad.requests(), len(bad.seqs()), len(got), len(left))
	})

	t.Run("422 is dead-lettered", func(t *testing.T) {
		refuse, good := e2eNewIngest(t, http.StatusUnprocessableEntity), e2eNewIngest(t, http.StatusOK)
		bufPath := filepath.Join(t.TempDir(), "buf.db")
		led := newE2ELedger(0)
		g := e2eStartGateway(t, siteFor(bufPath, refuse.URL, good.URL), &e2eLineWriter{fn: led.stored}, "warn")
		testtool.WaitFor(t, 30*time.Second, "5 dead letters and 20 delivered packets", func() bool {
			return len(e2eDeadLettered(g.stderr.String())) >= 5 && len(good.seqs()) >= 20
		})
		if err := g.stop(t); err != nil {
			t.Fatalf("gateway run: %v", err)
		}
		left, deadLetters, st := e2eLeftInBuffer(t, bufPath)
		dead := e2eDeadLettered(g.stderr.String())
		for s, reason := range deadLetters {
			if !dead[s] {
				t.Errorf("seq %d is a dead letter in the buffer, but no dead-letter line was logged for it", s)
			}
			if !strings.Contains(reason, "422") {
				t.Errorf("seq %d: dead-letter reason %q does not name the 422", s, reason)
			}
		}
		got := good.seqs()
		refused := refuse.seqs()
		for s := range dead {
			if got[s] > 0 {
				t.Errorf("seq %d was dead-lettered, yet sent to the other upstream too", s)
			}
			if left[s] {
				t.Errorf("seq %d was dead-lettered, yet is still queued", s)
			}
			if _, ok := deadLetters[s]; !ok {
				t.Errorf("seq %d was dead-lettered, yet is not among the buffer's dead letters", s)
			}
			if refused[s] == 0 {
				t.Errorf("seq %d was dead-lettered but never sent to the refusing upstream", s)
			}
		}
		var lost []uint64
		stored := led.storedSeqs()
		for _, s := range stored {
			if got[s] == 0 && !dead[s] && !left[s] {
				lost = append(lost, s)
			}
		}
		if len(lost) > 0 {
			t.Errorf("%d packets neither delivered, dead-lettered nor queued: %v", len(lost), e2eHead(lost, 30))
		}
		if n := strings.Count(g.stderr.String(), "delivery failed"); n > 0 {
			t.Errorf("a 422 is not an upstream failure, yet %d \"delivery failed\" lines:\n%s", n, g.stderr.String())
		}
		t.Logf("stored %d (last seq %d), dead-lettered %d (buffer: %d dead letters, %d since creation), delivered %d, left in buffer %d",
			len(stored), st.LastSeq, len(dead), st.DeadDepth, st.DeadLetters, len(got), len(left))
	})
}
