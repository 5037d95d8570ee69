package chaos

import (
	"bufio"
	"bytes"
	"context"
	"fmt"
	"math/rand/v2"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/rs/zerolog"

	"fieldlink/buffer"
	"fieldlink/buffer/cardstore"
	"fieldlink/internal/testtool"
	"fieldlink/packet"
)

// Run lengths: the chaos phase of the short run (go test ./tests/chaos/, part of
// make test), unless CHAOS_DURATION sets another (make chaos: 10m).
const shortDuration = 50 * time.Second

// window is the site's uplink.window: the most publishes awaiting their
// PUBACK on one broker connection.
const window = 16

// upstreams is how many brokers the gateway delivers to: A from the site
// file, B and C from the registry.
const upstreams = 3

// ackLag is the longest a delivered packet's ack may take to commit
// (PUBACK, the delivery loop's ack group, a commit on tmpfs), when the disk
// is not full. A kill -9 within ackLag of a delivery may send it again.
const ackLag = 2 * time.Second

// TestChaos runs the gateway under seeded random faults and accounts for
// every packet it produced: none may be missing, and duplicates stay under
// the bound dupBound derives. See the package documentation.
func TestChaos(t *testing.T) {
	dur, seed := runConfig(t)
	mosq := testtool.FindMosquitto(t)             // before the build: skip (or fail in CI) at once
	zerolog.SetGlobalLevel(zerolog.WarnLevel)     // toxiproxy's toxics trace to stdout
	bin := testtool.Build{Race: raceBuild}.Run(t) // with -race when the test runs under the race detector

	led := newLedger(gatewayID, upstreams)
	w := &world{led: led}
	w.links = startBrokers(t, mosq, led)
	w.reg = startRegistry(t, "mqtt://"+w.links[1].Addr(), "mqtt://"+w.links[2].Addr())
	emu, steady, flaky := startEmulator(t, seed)
	w.emu = emu

	dir := t.TempDir()
	bufDir, diskNote := dir, ""
	if d, why := mountTmpfs(t); d != nil {
		w.disk, bufDir = d, d.dir
	} else {
		if testtool.InCI() {
			t.Fatalf("the full-disk fault needs a tmpfs for the buffer (%s); CI runs the chaos test as root", why)
		}
		diskNote = "skipped(" + why + ")"
		t.Logf("no tmpfs for the buffer (%s): the diskfull fault is skipped; under CI=true this fails", why)
	}
	site := siteFile(t, dir, steady, flaky, filepath.Join(bufDir, "buffer.db"), w.links[0].Addr(), w.reg.url, window)
	if out, err := gatewayCmd(bin, "check", "-c", site); err != nil {
		t.Fatalf("the generated site file does not pass gateway check: %v\n%s", err, out)
	}

	logPath := filepath.Join(dir, "gateway.log")
	if p := os.Getenv("CHAOS_LOG"); p != "" {
		logPath = p
	}
	w.gw = startGateway(t, bin, site, logPath, led)
	for warm := time.Now(); ; time.Sleep(50 * time.Millisecond) {
		a := led.account(nil)
		if a.perBroker[0] > 5 && a.perBroker[1] > 5 && a.perBroker[2] > 5 {
			break
		}
		if time.Since(warm) > time.Minute {
			r, _, _ := w.reg.stats()
			t.Fatalf("after a minute, not every broker (A from the site file, B and C from the registry) has packets: produced %d, receipts A/B/C %v, registry requests %d",
				a.produced, a.perBroker, r)
		}
	}

	avail := kinds
	if w.disk == nil {
		avail = kinds[:len(kinds)-1]
	}
	sched := plan(rand.New(rand.NewPCG(uint64(seed), 0x6368616f73)), dur, avail)
	for _, f := range sched {
		t.Logf("planned: %v", f)
	}

	// The chaos phase, then every fault healed.
	in := &injector{w: w}
	t0 := time.Now()
	ctx, cancel := context.WithDeadline(context.Background(), t0.Add(dur))
	in.run(ctx, t0, sched)
	cancel()
	healed := time.Now()

	// The drain: everything produced before the heal reaches a broker.
	drainLimit := 60*time.Second + dur/10
	var stuck []key
	for {
		stuck = led.undelivered(healed)
		if len(stuck) == 0 || time.Since(healed) > drainLimit {
			break
		}
		time.Sleep(50 * time.Millisecond)
	}
	drained := time.Since(healed)

	stopErr := w.gw.stop()
	left, stats := leftInBuffer(t, bin, site, filepath.Join(bufDir, "buffer.db"))
	a := led.account(left)
	spans := in.done()
	bound, boundWhy := dupBound(spans, in.killTimes(), led)
	counts := in.counts()
	instances, unexpected, races := w.gw.report()

	var fs []string
	for _, k := range kinds {
		if k == diskfull && diskNote != "" {
			fs = append(fs, string(k)+":"+diskNote)
			continue
		}
		fs = append(fs, fmt.Sprintf("%s:%d", k, counts[k]))
	}
	es := emu.Stats().Slaves[flakySlave()]
	regReq, _, regRefused := w.reg.stats()
	figures := fmt.Sprintf("chaos: seed=%d duration=%v produced=%d delivered=%d left=%d unconfirmed=%d missing=%d duplicates=%d (bound %d) refused=%d phantom=%d faults={%s} longest_delay=%v drain=%v restarts=%d flaky={dropped:%d exceptions:%d} registry={requests:%d refused:%d} brokers={A:%d B:%d C:%d}",
		seed, dur, a.produced, a.delivered, a.left, a.unconfirmed, len(a.missing), a.duplicates, bound, a.refused, a.phantom,
		strings.Join(fs, ", "), a.longest.Round(time.Millisecond), drained.Round(time.Millisecond), instances-1,
		es.Dropped, es.Exceptions, regReq, regRefused, a.perBroker[0], a.perBroker[1], a.perBroker[2])
	t.Log(figures)
	t.Logf("duplicate bound: %s", boundWhy)
	for _, s := range spans {
		note := ""
		switch {
		case s.skipped != "":
			note = " skipped: " + s.skipped
		case s.f.kind == diskfull && s.bit:
			note = " (appends refused, or kept in memory: not durable)"
		case s.f.kind == diskfull:
			note = " (the full disk never bit)"
		}
		t.Logf("fault %v: %s..%s%s", s.f, s.start.Format("15:04:05.000"), s.end.Format("15:04:05.000"), note)
	}
	if t.Failed() {
		return
	}

	// Judgement.
	replay := fmt.Sprintf("(replay: CHAOS_SEED=%d CHAOS_DURATION=%v go test -v -run TestChaos ./tests/chaos/; gateway log: %s)", seed, dur, logPath)
	if n := len(a.missing); n > 0 {
		var b strings.Builder
		for _, k := range a.missing[:min(n, 30)] {
			info := led.printedInfo(k)
			fmt.Fprintf(&b, "\n  %s; faults around: %v", info, in.active(led.printedAt(k)))
		}
		t.Errorf("LOSS: %d produced packets neither reached a broker nor are in the buffer %s:%s", n, replay, b.String())
	}
	if a.duplicates > bound {
		t.Errorf("%d duplicates, more than the bound %d (%s) %s; duplicated seqs: %v", a.duplicates, bound, boundWhy, replay, head(a.dupList, 40))
	}
	switch {
	case a.phantom > 0:
		msg := fmt.Sprintf("BUG phantom: the gateway printed %d packets as stored that the buffer refused (no Epoch, the poller's in-memory Seq) %s; first: %v",
			a.phantom, replay, a.phantoms)
		if knownBugs["phantom"] && os.Getenv("CHAOS_STRICT") == "" {
			t.Logf("KNOWN %s", msg)
		} else {
			t.Error(msg)
		}
	case knownBugs["phantom"] && a.refused > 0:
		t.Logf("the known bug phantom was not seen although %d appends were refused: once it is fixed, delete it from knownBugs", a.refused)
	}
	if len(stuck) > 0 {
		t.Errorf("HANG: %d packets produced before the faults were healed were still undelivered %v later, with every link healthy %s; first: %v",
			len(stuck), drainLimit, replay, head(stuck, 20))
	}
	if stopErr != nil {
		t.Errorf("stopping the gateway: %v %s", stopErr, replay)
	}
	for _, u := range unexpected {
		t.Errorf("CRASH: %s %s", u, replay)
	}
	if races > 0 {
		t.Errorf("the gateway reported %d data races; see %s", races, logPath)
	}
	for _, p := range a.problems {
		t.Errorf("%s %s", p, replay)
	}
	// One epoch, the card's; and the volatile buffer's once the full disk
	// made the gateway keep its readings in memory (the salvage counter is
	// checked below as well).
	epochs := 1
	if w.gw.full.Load() > 0 {
		epochs = 2
	}
	if a.epochs > epochs {
		t.Errorf("packets of %d buffer epochs (want %d): the buffer was salvaged (found corrupt) during the run %s", a.epochs, epochs, replay)
	}
	for _, name := range []string{"evicted (max_bytes)", "evicted (max_age)", "rejected (full)", "corrupt records"} {
		if v := stats[name]; v != "0" {
			t.Errorf("gateway buffer stats: %s is %q, want 0 %s", name, v, replay)
		}
	}
	if v := stats["salvages"]; !strings.HasPrefix(v, "0 ") {
		t.Errorf("gateway buffer stats: salvages %q, want none %s", v, replay)
	}
	bit := false
	for _, s := range spans {
		bit = bit || s.bit
	}
	// A full card refuses appends, or, since the gateway keeps its live
	// readings in a volatile buffer meanwhile (buffer/cardstore), says
	// so; refused (seqs a refused commit took) is no longer sure to be
	// above zero.
	if w.disk != nil && !bit {
		t.Errorf("the full disk never bit: the gateway neither stopped appending nor said its buffer is not durable (refused=%d) %s", a.refused, replay)
	}
	for _, k := range avail {
		if counts[k] == 0 {
			t.Errorf("no %s fault was injected %s", k, replay)
		}
	}
	if want := int(dur.Seconds() * 10); a.produced < want {
		t.Errorf("only %d packets produced in %v; want at least %d (10 a second)", a.produced, dur, want)
	}
}

// knownBugs are gateway bugs that the chaos run found and that are not
// fixed yet. A run tolerates them, and says so in its log, unless
// CHAOS_STRICT=1. Delete an entry once its fix is in: the run then holds
// the gateway to it again.
//
// Fixed: phantom. buffer.AppendAll returned a refused batch (disk full)
// with the Seq its packets came with (the poller's in-memory number), so
// the sink counted them as stored and -print printed them; it now clears
// Seq and Epoch of every packet it did not store.
var knownBugs = map[string]bool{}

// runConfig reads CHAOS_DURATION and CHAOS_SEED.
func runConfig(t *testing.T) (time.Duration, int64) {
	t.Helper()
	dur := shortDuration
	if s := os.Getenv("CHAOS_DURATION"); s != "" {
		d, err := time.ParseDuration(s)
		if err != nil || d < 20*time.Second {
			t.Fatalf("CHAOS_DURATION=%q: want a duration of at least 20s, such as 10m", s)
		}
		dur = d
	}
	seed := time.Now().UnixNano() % 1_000_000
	if s := os.Getenv("CHAOS_SEED"); s != "" {
		n, err := strconv.ParseInt(s, 10, 64)
		if err != nil {
			t.Fatalf("CHAOS_SEED=%q: want an integer", s)
		}
		seed = n
	}
	if dl, ok := t.Deadline(); ok && time.Until(dl) < dur+3*time.Minute {
		t.Fatalf("a %v chaos run needs a longer -timeout (it has %v left)", dur, time.Until(dl).Round(time.Second))
	}
	return dur, seed
}

func flakySlave() byte {
	for _, d := range emulatorDevices {
		if d.flaky {
			return d.slave
		}
	}
	return 0
}

// dupBound derives the most duplicates the faults can cause. A receipt of
// a packet beyond its first needs the gateway to send it again, which it
// does only for a packet it holds no ack for:
//
//   - each broker connection that breaks (an outage takes down one per
//     link, a reset resets one per link) fails at most window publishes
//     whose PUBACK had not arrived, and each may have reached the broker;
//   - each kill -9 does that on all upstreams at once (window × upstreams),
//     and also loses the acks not yet committed: those of the packets
//     delivered within ackLag before the kill or, when the disk is full
//     (every ack commit fails, and is retried in memory), since the
//     episode began.
//
// Latency spikes and bandwidth squeezes are held well under the publish
// timeout (10 s), so they break nothing; if they did, the bound would be
// exceeded and the run would fail, which is what should happen.
func dupBound(spans []span, kills []time.Time, led *ledger) (int, string) {
	breaks := 0
	for _, s := range spans {
		if s.skipped != "" {
			continue
		}
		switch s.f.kind {
		case outage1, outage2, outage3, reset:
			breaks += len(s.f.links)
		case diskfull:
			breaks += upstreams // every link is held down while the backlog grows
		}
	}
	bound := window * breaks
	var lag []string
	lagTotal := 0
	for _, k := range kills {
		from := k.Add(-ackLag)
		for _, s := range spans {
			if s.f.kind == diskfull && s.skipped == "" && !k.Before(s.start) && !k.After(s.end.Add(ackLag)) && s.start.Before(from) {
				from = s.start
			}
		}
		n := led.firstReceivedIn(from, k.Add(200*time.Millisecond))
		lagTotal += n
		lag = append(lag, strconv.Itoa(n))
		bound += window*upstreams + n
	}
	why := fmt.Sprintf("window %d × %d broken links + %d kills × (window %d × %d upstreams) + acks lost to the kills %d [%s]",
		window, breaks, len(kills), window, upstreams, lagTotal, strings.Join(lag, " "))
	return bound, why
}

// leftInBuffer runs `gateway buffer export` and `gateway buffer stats` on
// the stopped gateway's buffer: what is still queued, and the counters.
func leftInBuffer(t *testing.T, bin, site, bufPath string) (map[key]bool, map[string]string) {
	t.Helper()
	left := leftInVolatile(t, bufPath)
	out, err := gatewayCmd(bin, "buffer", "export", "-c", site)
	if err != nil {
		t.Fatalf("%v", err)
	}
	sc := bufio.NewScanner(bytes.NewReader(out))
	sc.Buffer(make([]byte, 64<<10), 1<<20)
	for sc.Scan() {
		p, err := packet.Decode(sc.Bytes())
		if err != nil {
			t.Errorf("gateway buffer export: %v: %.200s", err, sc.Text())
			continue
		}
		testtool.ValidPacket(t, sc.Bytes())
		left[key{p.Epoch, p.Seq}] = true
	}
	out, err = gatewayCmd(bin, "buffer", "stats", "-c", site)
	if err != nil {
		t.Fatalf("%v", err)
	}
	stats := map[string]string{}
	for line := range strings.Lines(string(out)) {
		// "name  value": the name may hold single spaces, the gap is two.
		name, value, ok := strings.Cut(strings.TrimSpace(line), "  ")
		if ok {
			stats[name] = strings.TrimSpace(value)
		}
	}
	return left, stats
}

func head[T any](s []T, n int) []T {
	if len(s) > n {
		return s[:n]
	}
	return s
}

// leftInVolatile is what the stopped gateway left in its volatile buffer
// (buffer/cardstore: the card was full when it last stored a reading, as
// when a kill lands while the disk is full): not lost, the next start
// delivers it, and the card's export does not show it.
func leftInVolatile(t *testing.T, bufPath string) map[key]bool {
	t.Helper()
	left := map[key]bool{}
	path, ok := cardstore.LeftVolatile(bufPath)
	if !ok {
		return left
	}
	t.Cleanup(func() { os.Remove(path) }) // in /run, beside other runs
	b, err := buffer.Open(path, buffer.Options{})
	if err != nil {
		t.Errorf("the volatile buffer %s the gateway left: %v", path, err)
		return left
	}
	defer b.Close()
	if err := b.Each(func(r buffer.Record) error {
		p, err := packet.Decode(r.Data)
		if err != nil {
			t.Errorf("the volatile buffer %s: %v: %.200s", path, err, r.Data)
			return nil
		}
		left[key{p.Epoch, p.Seq}] = true
		return nil
	}); err != nil {
		t.Errorf("the volatile buffer %s: %v", path, err)
	}
	if len(left) > 0 {
		t.Logf("%d packets left in the volatile buffer %s (delivered at the next start)", len(left), path)
	}
	return left
}
