package selector

import (
	"math"
	"math/bits"
	"sync/atomic"
	"time"
)

// drfCSWLC is "drf_cswlc", the gateway's own selector: the multi-factor
// weight of DRF (docs/algorithms.md § 000) and the weighted least
// connections pick of CS-WLC (§ 002), with what production balancers learnt
// since (docs/algorithms.md, drf_cswlc, says which part comes from where):
//
//   - Weight, recomputed every Interval (jittered) and at every table change,
//     off the pick path: W = weight · ((ℓ_best + 5 ms)/(ℓ + 5 ms))^Latency ·
//     warm, ℓ the upstream's delivery latency (a slower batch replaces the
//     estimate, a faster one moves it by Fall, none lets it decay toward the
//     probe round trip with time constant Decay, and holds it while the
//     latest probe failed), ℓ_best the lowest. A probe that saw the
//     upstream slow (it failed, or answered no faster than half the
//     estimate, while that was 4× ℓ_best or more: a probe of the server's
//     own answer, as an MQTT publish is, not a TCP connect) is believed at
//     once when it next answers 4× faster than the estimate; a delivery
//     that began before a probe found the upstream recovered (believed so,
//     or answering after failures) does not count, its slowness outdated.
//   - Pick: among the upstreams that are not hot, the least
//     (in-flight + 1 + Reported · connections) / W · e^Spread, a full
//     scan, e drawn per upstream and pick from an exponential of mean 1
//     (see scan: upstreams far apart are told apart, upstreams a few
//     percent apart share, so that a fleet of gateways does not all send
//     to the one that answers fastest); connections is a fresh load report's count, counted only
//     for an upstream this gateway has no delivery measure of (C3's
//     correction where the gateway is blind, without herding on stale
//     reports where it is not).
//   - Hot: a timeout, FailuresToEject failures in a row, or deliveries
//     pending with none ending for Stall times the latency estimate (at least
//     MinStall) eject the upstream for Eject·2^(k−1), k its ejections in a
//     row, at most MaxEject, jittered ±20%; at most half the upstreams at
//     once; a probe that finds it recovered (as above) ends the ejection.
//     A timeout or a fast error is never fast.
//   - Warm-up: an upstream that joins, comes back up or back from an
//     ejection has its chance of a pick scaled by max(0.1,
//     (t/WarmUp)^(1/Aggression)), Envoy's slow start (W by that to the
//     power Spread).
//
// Pick reads the published weights, the hot mask and the live in-flight
// counts; it does not allocate or lock.
type drfCSWLC struct {
	opt DRFCSWLCOptions
	ref refresher[dcWeights]

	// The recomputer's own state, guarded by ref.mu.
	st       [MaxUpstreams]dcState
	prevBest float64 // the lowest latency at the last recomputation
}

// DRFCSWLCOptions configures drf_cswlc ([StrategyOptions].DRFCSWLC). The zero value is the default;
// the defaults are the lab's tuned constants (docs/selector-lab.md).
type DRFCSWLCOptions struct {
	// Interval between recomputations of the weights. Default 250 ms.
	Interval time.Duration
	// Latency is the factor weight (exponent) of the latency factor.
	// Default 1.
	Latency float64
	// Reported scales the connection count of a fresh load report in the
	// pick's load. Default 0.5.
	Reported float64
	// Decay is the time constant with which an upstream's latency estimate
	// returns to its probe round trip without deliveries. Default 1 s.
	Decay time.Duration
	// FailuresToEject is how many failures in a row eject an upstream; a
	// timeout ejects at once. Default 2.
	FailuresToEject int
	// Eject is the first ejection; each one in a row doubles it up to
	// MaxEject. Defaults 1 s and 30 s.
	Eject, MaxEject time.Duration
	// WarmUp is how long an upstream takes to reach its full weight after
	// it joins or comes back. Default 3 s.
	WarmUp time.Duration
	// Spread is how far the pick strays from the least weighted load to
	// spread a fleet: the load of each upstream is multiplied by e^Spread,
	// e drawn from an exponential of mean 1 per upstream and pick, so that
	// upstream i is picked with probability proportional to
	// (W_i / (in-flight_i + 1))^(1/Spread). Default 1/3: an upstream 10%
	// slower than another gets 0.73 of its picks, one half as fast an
	// eighth; 0 is the plain least weighted load, 1 a pick proportional
	// to W when nothing is in flight.
	Spread float64
	// Aggression shapes the warm-up as Envoy's slow start does: W is
	// scaled by max(0.1, (t/WarmUp)^(1/Aggression)), so above 1 the weight
	// comes back faster at first. Default 2: a gateway gives an upstream
	// back up a sixth of its traffic (of three) within half a second, and
	// all its share after WarmUp.
	Aggression float64
	// Stall and MinStall: deliveries pending with none ending for Stall
	// times the latency estimate, and at least MinStall, eject. Defaults 10
	// and 1 s.
	Stall    float64
	MinStall time.Duration
	// Fall is how far a faster batch of deliveries moves the latency
	// estimate toward itself (a slower one replaces it). Default 1: replaces it too.
	Fall float64
}

// WithDefaults returns o with every zero field set to its default: the
// constants a strategy made from o runs with.
func (o DRFCSWLCOptions) WithDefaults() DRFCSWLCOptions {
	o.defaults()
	return o
}

func (o *DRFCSWLCOptions) defaults() {
	if o.Interval <= 0 {
		o.Interval = 250 * time.Millisecond
	}
	if o.Latency == 0 {
		o.Latency = 1
	}
	if o.Decay <= 0 {
		o.Decay = 3 * time.Second
	}
	if o.Fall <= 0 || o.Fall > 1 {
		o.Fall = 1
	}
	if o.Reported == 0 {
		o.Reported = 0.2
	}
	if o.FailuresToEject <= 0 {
		o.FailuresToEject = 2
	}
	if o.Eject <= 0 {
		o.Eject = time.Second
	}
	if o.MaxEject <= 0 {
		o.MaxEject = 30 * time.Second
	}
	if o.WarmUp <= 0 {
		o.WarmUp = 3 * time.Second
	}
	if !(o.Spread > 0) || math.IsInf(o.Spread, 0) {
		o.Spread = 1.0 / 3
	}
	if !(o.Aggression > 0) || math.IsInf(o.Aggression, 0) {
		o.Aggression = 2
	}
	if o.Stall <= 0 {
		o.Stall = 5
	}
	if o.MinStall <= 0 {
		o.MinStall = 250 * time.Millisecond
	}
}

// dcWeights is what a pick reads: one recomputation's weights.
type dcWeights struct {
	w   [MaxUpstreams]atomic.Uint64 // float64 bits of W (> 0)
	inv [MaxUpstreams]atomic.Uint64 // float64 bits of 1/W
	rep [MaxUpstreams]atomic.Uint64 // float64 bits of Reported · connections
	hot atomic.Uint64               // bit i: upstream i is ejected
}

// dcState is the recomputer's memory of one upstream.
type dcState struct {
	gen       uint64 // the slot generation it describes
	seen      uint64 // deliveries ended when last read
	failures  uint64 // failures when last read
	timeouts  uint64 // timeouts when last read
	est       float64
	estAt     int64 // table time of est
	hasEst    bool
	wasUp     bool
	warmFrom  int64 // table time the warm-up started
	ejectTill int64 // table time the ejection ends
	ejections int   // ejections in a row
	okSince   int64 // table time of the first success after an ejection
	// probeAt and probeFails are the latest probe seen and the probe
	// failures counted then: a probe result is new when either moved.
	probeAt    time.Time
	probeFails uint64
	// tracks: while the upstream was slow, a probe failed or answered as
	// slowly as its deliveries (a probe of its own answer, not a TCP
	// connect): the next probe that answers fast is believed at once.
	tracks bool
	// probeFailed: the latest probe seen had failed. freshAt, when
	// hasFresh: the table time of the latest probe that found the upstream
	// recovered (believed after it saw the slowness, or answering after
	// failures): a delivery longer than the time since then began before
	// it and measures the upstream as it was.
	probeFailed bool
	freshAt     int64
	hasFresh    bool
	endedAt     int64 // table time a delivery to it last ended (or it was last idle)
	pending     bool  // deliveries were pending at the last recomputation
}

// newDRFCSWLC returns a drf_cswlc strategy.
func newDRFCSWLC(opt DRFCSWLCOptions) *drfCSWLC {
	opt.defaults()
	s := &drfCSWLC{opt: opt}
	s.ref.init(int64(opt.Interval), true)
	// Gateways that start together must not recompute together: a shared
	// rhythm is a shared herd (the lab's S6a).
	s.ref.jitter = 0.5
	return s
}

func (*drfCSWLC) Name() string { return "drf_cswlc" }

// Pick picks as the type's doc describes.
func (s *drfCSWLC) Pick(t *Table, skip uint64) (int, bool) {
	cand := t.Candidates(skip)
	if i, ok, done := atMostOne(cand); done {
		return i, ok
	}
	p := s.ref.get(t, t.lastSeen(), s)
	if cold := cand &^ p.hot.Load(); cold != 0 {
		cand = cold
		if i, ok, done := atMostOne(cand); done {
			return i, ok
		}
	}
	return s.scan(t, p, cand), true
}

// scan returns the member of cand with the lowest weighted load times
// e^Spread, e drawn from an exponential of mean 1 for each upstream at each
// pick. −ln e is a Gumbel draw, so this is a Gumbel-max pick: upstream i
// wins with probability proportional to load_i^(−1/Spread), that is
// (W_i / (in-flight_i + 1))^(1/Spread). Upstreams whose loads differ much
// (a capacity 8 against 1, a slow node) are told apart almost as by the
// least weighted load; upstreams within a few percent share. The plain
// least weighted load gave an idle gateway's every pick to the largest W,
// and a fleet of idle gateways (each with a packet in flight now and then)
// all sent to the upstream that answered fastest for all of them: on a
// NATS cluster the stream's leader (docs/cluster.md). Ties have
// probability 0; the first wins.
func (s *drfCSWLC) scan(t *Table, p *dcWeights, cand uint64) int {
	best, at := math.Inf(1), trailingZeros(cand)
	for m := cand; m != 0; m &= m - 1 {
		i := trailingZeros(m) & (MaxUpstreams - 1)
		e := -math.Log1p(-t.float01())
		if l := s.load(t, p, i) * math.Pow(e, s.opt.Spread); l < best {
			best, at = l, i
		}
	}
	return at
}

// load is upstream i's weighted load, as the pick compares it.
func (s *drfCSWLC) load(t *Table, p *dcWeights, i int) float64 {
	n := float64(inflight(t.slots[i].state.Load()))
	return (n + 1 + math.Float64frombits(p.rep[i].Load())) * math.Float64frombits(p.inv[i].Load())
}

// recompute computes the weights and the hot mask at table time now.
func (s *drfCSWLC) recompute(t *Table, now int64, out *dcWeights) {
	o := &s.opt
	n := t.Len()
	var lat [MaxUpstreams]float64
	var live, hot uint64
	best := math.Inf(1)
	for i := range n {
		u := t.ups[i].Load()
		st := &s.st[i]
		if st.gen != u.gen {
			*st = dcState{gen: u.gen, warmFrom: now}
		}
		if u.retired.Load() {
			st.wasUp = false
			continue
		}
		up := u.up.Load()
		if up && !st.wasUp {
			st.warmFrom = now // joined or back up: warm up again
		}
		st.wasUp = up
		if !up {
			continue
		}
		live |= 1 << i
		u.mu.Lock()
		count, fails, touts := u.count, u.failures.Load(), u.timeouts
		consec := u.consecutive.Load()
		probe := float64(u.probeRTT.Load())
		// A probe that failed last leaves no round trip to decay toward:
		// the one before it may be from before the upstream turned slow.
		probeFailing := u.probeConsecutive > 0
		probeAt, probeFails := u.probeAt, u.probeFailures
		// A probe that saw the slowness sees it gone (believed below), or
		// one answers after failures: it found the upstream back.
		answered := !probeFailing && probe > 0 && !probeAt.Equal(st.probeAt)
		believe := answered && st.hasEst && st.tracks && probe < st.est/4
		recovered := believe || answered && (st.probeFailed || probeFails != st.probeFails)
		if recovered {
			st.freshAt, st.hasFresh = now, true
		}
		st.probeFailed = probeFailing
		// The latency of the deliveries that ended since: not of those
		// that began before a probe found the upstream recovered (longer
		// than the time since), whose slowness that probe outdated. One
		// ending after the probe would otherwise make the upstream slow
		// again until its next probe (an interval, 10 s by default) and
		// the estimate's decay, and the pick's chances as W^(1/Spread)
		// give a slow upstream almost no delivery to correct it.
		var recent float64
		if k := min(int(count-st.seen), u.ringLen); k > 0 {
			var n int
			for j := 1; j <= k; j++ {
				l := float64(u.ring[(u.ringNext-j+len(u.ring))%len(u.ring)])
				if st.hasFresh && l > float64(now-st.freshAt) {
					continue
				}
				recent += l
				n++
			}
			if n > 0 {
				recent /= float64(n)
			}
		}
		load, hasLoad := u.load, u.hasLoad
		u.mu.Unlock()

		newFails, newTouts := fails-st.failures, touts-st.timeouts
		newCount := count - st.seen
		// A stall is timed from the later of the last delivery that ended
		// and the first recomputation that saw deliveries pending.
		pending := inflight(t.slots[i].state.Load())
		if newCount > 0 || pending == 0 || !st.pending {
			st.endedAt = now
		}
		st.pending = pending > 0
		st.seen, st.failures, st.timeouts = count, fails, touts
		// Latency: a slower batch replaces the estimate at once (peak),
		// a faster one halves the distance; none decays toward the probe.
		switch {
		case newCount > newFails && recent > 0:
			if !st.hasEst || recent > st.est {
				st.est = recent
			} else {
				st.est = st.est + (recent-st.est)*o.Fall
			}
			st.hasEst, st.estAt = true, now
		case st.hasEst && probe > 0 && probeFailing:
			st.estAt = now // held: no decay while the probes fail
		case believe:
			// A probe that saw the slowness sees it gone: believed at once.
			st.est, st.estAt, st.tracks = probe, now, false
		case st.hasEst && probe > 0:
			w := decay(now-st.estAt, float64(o.Decay))
			st.est = probe + (st.est-probe)*w
			st.estAt = now
		}
		if newProbe := !probeAt.Equal(st.probeAt) || probeFails != st.probeFails; newProbe && st.hasEst &&
			s.prevBest > 0 && st.est >= 4*s.prevBest && (probeFailing || probe >= st.est/2) {
			st.tracks = true
		}
		st.probeAt, st.probeFails = probeAt, probeFails
		// Ejection: a timeout, FailuresToEject failures in a row, or
		// deliveries pending with none ending for Stall times the latency
		// (at least MinStall): a black hole is found before its timeouts.
		stall := max(float64(o.MinStall), o.Stall*st.est)
		stalled := pending > 0 && float64(now-st.endedAt) > stall
		if recovered && now < st.ejectTill {
			// A probe found it back: the ejection ends (Envoy's
			// un-ejection by a passing active health check), its warm-up
			// starts, and its stall is timed from now. Its doubling is not
			// forgiven: if it fails again, it is out for longer.
			st.ejectTill, st.warmFrom, st.endedAt = now, now, now
			stalled = false
		}
		if now >= st.ejectTill && (newTouts > 0 || stalled || newFails > 0 && consec >= uint64(o.FailuresToEject)) {
			st.ejections++
			d := float64(o.Eject) * math.Pow(2, float64(st.ejections-1))
			d = min(d, float64(o.MaxEject)) * (0.8 + 0.4*t.float01())
			st.ejectTill, st.okSince = now+int64(d), 0
			st.warmFrom, st.endedAt = st.ejectTill, st.ejectTill
		}
		if now < st.ejectTill {
			hot |= 1 << i
		} else if st.ejections > 0 && newCount > newFails && consec == 0 {
			if st.okSince == 0 {
				st.okSince = now
			} else if now-st.okSince > int64(o.MaxEject) {
				st.ejections = 0 // healthy for a while: forgive
			}
		}
		switch {
		case st.hasEst:
			lat[i] = st.est
		case probe > 0:
			lat[i] = probe
		}
		if lat[i] > 0 {
			best = min(best, lat[i])
		}
		out.rep[i].Store(0)
		if hasLoad && int64(load.At.Sub(t.epoch))+int64(t.loadTTL) > now {
			// Another gateway's load counts only where this one has no
			// measure of its own: a report is stale, and read alike by every
			// gateway, which would all herd on it; its own deliveries are
			// fresh and its own.
			if !st.hasEst {
				out.rep[i].Store(math.Float64bits(o.Reported * float64(max(load.Connections, 0))))
			}
		}
	}
	s.prevBest = best
	// At most half the live upstreams hot: the longest ejected come back.
	for bits.OnesCount64(hot) > bits.OnesCount64(live)/2 {
		j, till := -1, int64(math.MinInt64)
		for m := hot; m != 0; m &= m - 1 {
			i := trailingZeros(m)
			if s.st[i].ejectTill > till {
				j, till = i, s.st[i].ejectTill
			}
		}
		hot &^= 1 << j
	}
	const c = float64(5 * time.Millisecond)
	for i := range n {
		if live&(1<<i) == 0 {
			out.w[i].Store(math.Float64bits(1))
			out.inv[i].Store(math.Float64bits(1))
			continue
		}
		w := float64(t.slots[i].weight.Load())
		if lat[i] > 0 && best < math.Inf(1) {
			w *= math.Pow((best+c)/(lat[i]+c), o.Latency)
		}
		if age := now - s.st[i].warmFrom; age < int64(o.WarmUp) {
			// Raised to Spread, the warm-up scales the upstream's chance
			// of a pick by Envoy's factor itself.
			warm := max(0.1, math.Pow(float64(max(age, 0))/float64(o.WarmUp), 1/o.Aggression))
			w *= math.Pow(warm, o.Spread)
		}
		w = max(w, 1e-9)
		out.w[i].Store(math.Float64bits(w))
		out.inv[i].Store(math.Float64bits(1 / w))
	}
	out.hot.Store(hot)
}
