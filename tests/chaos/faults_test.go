package chaos

import (
	"context"
	"fmt"
	"math/rand/v2"
	"slices"
	"strings"
	"sync"
	"time"
)

// kind is a kind of fault.
type kind string

const (
	outage1  kind = "outage1"  // one broker's link down
	outage2  kind = "outage2"  // two
	outage3  kind = "outage3"  // all three
	latency  kind = "latency"  // latency spike on one to three links
	reset    kind = "reset"    // connections reset (TCP RST) on one to three links
	squeeze  kind = "squeeze"  // bandwidth squeeze on one to three links
	kill9    kind = "kill9"    // kill -9 of the gateway, then a restart
	registry kind = "registry" // the upstream registry answers 503 or drops connections
	diskfull kind = "diskfull" // the buffer's tmpfs filled, held, freed
)

// kinds is every kind, in the order of the figures line.
var kinds = []kind{outage1, outage2, outage3, latency, reset, squeeze, kill9, registry, diskfull}

// fault is one planned fault.
type fault struct {
	kind    kind
	at      time.Duration // after the chaos phase began
	dur     time.Duration // how long it is held (kill9: how long the gateway stays dead)
	links   []int         // outage, latency, reset, squeeze
	latency time.Duration // latency
	rateKB  int64         // squeeze: KB/s
	mode    string        // registry: "503" or "drop"
}

func (f fault) String() string {
	var b strings.Builder
	fmt.Fprintf(&b, "%s@%.1fs/%.1fs", f.kind, f.at.Seconds(), f.dur.Seconds())
	if len(f.links) > 0 {
		b.WriteString(" links=")
		for _, i := range f.links {
			b.WriteByte(byte('A' + i))
		}
	}
	switch f.kind {
	case latency:
		fmt.Fprintf(&b, " %v", f.latency)
	case squeeze:
		fmt.Fprintf(&b, " %dKB/s", f.rateKB)
	case registry:
		b.WriteString(" " + f.mode)
	}
	return b.String()
}

// plan draws the fault schedule of a chaos phase of length d from rng:
// every kind in avail at least once, one fault every 5 s on average, each
// starting at a random moment of its own slot (faults may overlap).
func plan(rng *rand.Rand, d time.Duration, avail []kind) []fault {
	n := max(len(avail)+1, int(d/(5*time.Second)))
	list := slices.Clone(avail)
	for len(list) < n {
		list = append(list, avail[rng.IntN(len(avail))])
	}
	rng.Shuffle(len(list), func(i, j int) { list[i], list[j] = list[j], list[i] })
	slot := d / time.Duration(n)
	between := func(lo, hi time.Duration) time.Duration { return lo + time.Duration(rng.Int64N(int64(hi-lo)+1)) }
	someLinks := func(k int) []int {
		return rng.Perm(3)[:k]
	}
	out := make([]fault, 0, n)
	for i, k := range list {
		f := fault{kind: k, at: time.Duration(i)*slot + between(0, slot*6/10)}
		switch k {
		case outage1:
			f.dur, f.links = between(2*time.Second, 8*time.Second), someLinks(1)
		case outage2:
			f.dur, f.links = between(2*time.Second, 8*time.Second), someLinks(2)
		case outage3:
			f.dur, f.links = between(2*time.Second, 6*time.Second), someLinks(3)
		case latency:
			f.dur, f.links = between(3*time.Second, 8*time.Second), someLinks(1+rng.IntN(3))
			f.latency = between(150*time.Millisecond, time.Second).Round(time.Millisecond)
		case reset:
			f.dur, f.links = between(300*time.Millisecond, 1500*time.Millisecond), someLinks(1+rng.IntN(3))
		case squeeze:
			f.dur, f.links = between(4*time.Second, 10*time.Second), someLinks(1+rng.IntN(3))
			f.rateKB = 4 + rng.Int64N(13)
		case kill9:
			f.dur = between(200*time.Millisecond, 2*time.Second)
		case registry:
			f.dur = between(3*time.Second, 10*time.Second)
			f.mode = []string{"503", "drop"}[rng.IntN(2)]
		case diskfull:
			f.dur = between(3*time.Second, 8*time.Second)
		}
		out = append(out, f)
	}
	return out
}

// span is a fault as it happened.
type span struct {
	f          fault
	start, end time.Time
	skipped    string // why it was not injected
	bit        bool   // diskfull: appends were refused
}

// injector applies faults to the world and records them.
type injector struct {
	w *world

	mu    sync.Mutex
	spans []span
	kills []time.Time
}

// run injects the faults of sched, relative to t0, until ctx ends; then
// every fault still held is healed. It returns once all are healed.
func (in *injector) run(ctx context.Context, t0 time.Time, sched []fault) {
	var wg sync.WaitGroup
	for _, f := range sched {
		wg.Go(func() {
			t := time.NewTimer(time.Until(t0.Add(f.at)))
			defer t.Stop()
			select {
			case <-ctx.Done():
				return
			case <-t.C:
			}
			in.inject(ctx, f)
		})
	}
	wg.Wait()
}

// hold waits for d or ctx's end.
func hold(ctx context.Context, d time.Duration) {
	t := time.NewTimer(d)
	defer t.Stop()
	select {
	case <-ctx.Done():
	case <-t.C:
	}
}

var toxicSeq struct {
	mu sync.Mutex
	n  int
}

func toxicName(k kind) string {
	toxicSeq.mu.Lock()
	defer toxicSeq.mu.Unlock()
	toxicSeq.n++
	return fmt.Sprintf("%s-%d", k, toxicSeq.n)
}

// inject applies f, holds it and heals it.
func (in *injector) inject(ctx context.Context, f fault) {
	w := in.w
	s := span{f: f, start: time.Now()}
	switch f.kind {
	case outage1, outage2, outage3:
		for _, i := range f.links {
			w.links[i].Down()
		}
		hold(ctx, f.dur)
		for _, i := range f.links {
			w.links[i].Up()
		}
	case latency, reset, squeeze:
		name := toxicName(f.kind)
		var js string
		switch f.kind {
		case latency:
			js = fmt.Sprintf(`{"name":%q,"type":"latency","stream":"downstream","attributes":{"latency":%d,"jitter":%d}}`,
				name, f.latency.Milliseconds(), f.latency.Milliseconds()/5)
		case reset:
			js = fmt.Sprintf(`{"name":%q,"type":"reset_peer","stream":"upstream","attributes":{"timeout":0}}`, name)
		case squeeze:
			js = fmt.Sprintf(`{"name":%q,"type":"bandwidth","stream":"upstream","attributes":{"rate":%d}}`, name, f.rateKB)
		}
		for _, i := range f.links {
			w.links[i].AddToxic(js)
		}
		hold(ctx, f.dur)
		for _, i := range f.links {
			w.links[i].RemoveToxic(name)
		}
	case kill9:
		at, ok := w.gw.kill9(f.dur)
		if !ok {
			s.skipped = "gateway not running"
			break
		}
		s.start = at
		in.mu.Lock()
		in.kills = append(in.kills, at)
		in.mu.Unlock()
	case registry:
		w.reg.setDown(f.mode, true)
		hold(ctx, f.dur)
		w.reg.setDown(f.mode, false)
	case diskfull:
		if w.disk == nil {
			s.skipped = "no tmpfs"
			break
		}
		if why := w.disk.fill(); why != "" {
			s.skipped = why
			break
		}
		s.start = time.Now()
		// The file has free pages of its own, which a full disk does not
		// take away: the backlog must grow into the full disk. Every link
		// is held down until the appends stop, then comes back while the
		// disk stays full (acks must commit too).
		for i := range w.links {
			w.links[i].Down()
		}
		s.bit = in.waitAppendsStop(45 * time.Second)
		for i := range w.links {
			w.links[i].Up()
		}
		hold(ctx, f.dur)
		w.disk.free()
	}
	s.end = time.Now()
	in.mu.Lock()
	in.spans = append(in.spans, s)
	in.mu.Unlock()
}

// counts returns the faults injected, by kind.
func (in *injector) counts() map[kind]int {
	in.mu.Lock()
	defer in.mu.Unlock()
	m := map[kind]int{}
	for _, s := range in.spans {
		if s.skipped == "" {
			m[s.f.kind]++
		}
	}
	return m
}

// active lists the faults that were held at t, for failure messages.
func (in *injector) active(t time.Time) []string {
	in.mu.Lock()
	defer in.mu.Unlock()
	var out []string
	for _, s := range in.spans {
		if s.skipped == "" && !t.Before(s.start.Add(-time.Second)) && !t.After(s.end.Add(time.Second)) {
			out = append(out, s.f.String())
		}
	}
	return out
}

// killTimes returns the moments of the kills.
func (in *injector) killTimes() []time.Time {
	in.mu.Lock()
	defer in.mu.Unlock()
	return slices.Clone(in.kills)
}

func (in *injector) done() []span {
	in.mu.Lock()
	defer in.mu.Unlock()
	out := slices.Clone(in.spans)
	slices.SortFunc(out, func(a, b span) int { return a.start.Compare(b.start) })
	return out
}

// waitAppendsStop waits until the gateway has logged ENOSPC and printed
// no packet for a second while the same process ran (its appends are
// refused), or said that its buffer is not durable because the card is
// full (it goes on into its volatile buffer in memory), or until limit.
func (in *injector) waitAppendsStop(limit time.Duration) bool {
	const quiet = time.Second
	deadline := time.Now().Add(limit)
	g := in.w.gw
	enospc, full := g.enospc.Load(), g.full.Load()
	last, inst, since := in.w.led.produced(), g.current(), time.Now()
	for time.Now().Before(deadline) {
		time.Sleep(100 * time.Millisecond)
		if g.full.Load() > full {
			return true
		}
		if n, i := in.w.led.produced(), g.current(); n != last || i != inst {
			last, inst, since = n, i, time.Now()
			continue
		}
		if time.Since(since) >= quiet && g.enospc.Load() > enospc {
			return true
		}
	}
	return false
}
