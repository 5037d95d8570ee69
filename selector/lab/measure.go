package lab

import (
	"math"
	"slices"
	"time"
)

// Trial is what one simulation of one strategy in one scenario with one seed
// measured, over the requests that arrived in the measured window
// [Warmup, Duration).
//
// Latencies are per packet, from its arrival to its acknowledgement,
// retries included; a packet never acknowledged within the scenario's
// Deadline counts as the deadline (with SingleAttempt: a failed packet
// counts as the timeout).
type Trial struct {
	Requests     int     // packets
	Mean         float64 // seconds
	P50          float64
	P99          float64
	P999         float64
	Success      float64 // fraction acknowledged within the deadline
	Success10s   float64 // fraction acknowledged within 10 s
	Success1s    float64 // fraction acknowledged within 1 s
	FirstSuccess float64 // fraction whose first attempt succeeded (the single-attempt view)
	Retried      float64 // fraction sent more than once
	FaultyShare  float64 // fraction of the fault window's requests sent to the faulty upstream; NaN when the scenario has none
	Jain         float64 // Jain's index over capacity-normalised utilisation
	// Share is the faulty upstream's share of each second's requests, by
	// second of the run (nil when the scenario has no faulty upstream).
	Share []float64
	// Events is how many events the run processed.
	Events int

	// Osc is the oscillation: the mean change of an upstream's share of the
	// requests from one 1 s bin to the next, |share(t) − share(t−1)|, over
	// the measured window, averaged over the upstreams other than the faulty
	// or joining one. NaN in Placement scenarios.
	Osc float64
	// SettleFault and SettleRecovery are the convergence times, seconds,
	// after the faulty upstream's faults start and end (see [settle]), the
	// mean over the run's faults; +Inf when one of them never settled, NaN
	// when the scenario has none.
	SettleFault, SettleRecovery float64

	// Cold join (an upstream with a JoinAt, the Faulty one).
	JoinSettle float64 // settle time after the join, towards its share over the run's last 20 s; +Inf never
	JoinRamp   float64 // seconds until its share of a 1 s bin first reaches half its capacity share; +Inf never
	JoinPeak   float64 // its largest share of a 1 s bin in the 5 s after the join, over its capacity share
	JoinP99    float64 // p99 of the requests that arrived in the 10 s after the join, seconds

	// Placement (connections): the balance of connections per broker
	// against capacity, x_b = connections_b / capacity share_b, over the
	// brokers up at the end of the run.
	PlaceBefore float64 // max x_b / mean x_b just before the fault, over every broker
	PlaceJain   float64 // Jain's index of x_b at the end
	PlaceMax    float64 // max x_b / mean x_b at the end
	Reconnect   float64 // seconds from the fault until the last of its gateways reconnected
	Balanced    float64 // Reconnect when PlaceMax ≤ placeBalanced at the end, else +Inf
	Overloaded  int     // reconnected gateways whose broker is offered more than its capacity at the end

	// Fleet (Scenario.Fleet), from the upstreams' shares of the requests
	// sent in 1 s bins, the fair share being 1/n of the n upstreams up:
	BusiestSteady float64 // the busiest upstream's share from Warmup to the first outage, over the fair share
	BusiestDown   float64 // the busiest upstream's share from 2 s into the first outage to its end, over the fair share then
	Back          float64 // seconds from the outage's end to the first bin from which the faulty upstream's share over 5 bins is half its fair share or more; +Inf never
	Swing         float64 // the widest band, over the upstreams, of their 1 s shares in steady state (5th to 95th percentile), in share
	// The restarted upstream's return: the most gateways that saw it up
	// again in one second (its reconnection storm), and seconds from the
	// outage's end to the first bin from which its share over 5 bins is
	// 90 % of its share in steady state or more (+Inf never).
	ReconnectPeak int
	BackShare     float64

	// Shares is each upstream's share of the measured attempts.
	Shares []float64
}

func (s *sim) result() Trial {
	sc := s.sc
	r := Trial{Requests: len(s.lat), Events: s.events, FaultyShare: math.NaN()}
	if len(s.lat) == 0 {
		return r
	}
	slices.Sort(s.lat)
	var sum float64
	for _, l := range s.lat {
		sum += float64(l)
	}
	n := len(s.lat)
	r.Mean = sum / float64(n) / 1e9
	r.P50 = quantile(s.lat, 0.5)
	r.P99 = quantile(s.lat, 0.99)
	r.P999 = quantile(s.lat, 0.999)
	r.Success = float64(s.ok) / float64(n)
	r.Success10s = float64(s.ok10s) / float64(n)
	r.Success1s = float64(s.ok1s) / float64(n)
	r.Retried = float64(s.retried) / float64(n)
	r.FirstSuccess = math.NaN()
	if s.first > 0 {
		r.FirstSuccess = float64(s.firstOK) / float64(s.first)
	}
	if sc.Faulty >= 0 && s.faultN > 0 {
		r.FaultyShare = float64(s.faultHit) / float64(s.faultN)
	}
	// Jain over utilisation / capacity share: busy worker-time per worker.
	window := float64(sc.Duration - sc.Warmup)
	var sx, sxx float64
	for i, up := range s.upstreams {
		u := float64(up.busyNs) / window / float64(sc.Upstreams[i].Workers)
		sx += u
		sxx += u * u
	}
	if sxx > 0 {
		r.Jain = sx * sx / (float64(len(s.upstreams)) * sxx)
	}
	var sent int
	for _, k := range s.sent {
		sent += k
	}
	for _, k := range s.sent {
		r.Shares = append(r.Shares, float64(k)/float64(max(sent, 1)))
	}
	r.Osc, r.SettleFault, r.SettleRecovery = math.NaN(), math.NaN(), math.NaN()
	r.JoinSettle, r.JoinRamp, r.JoinPeak, r.JoinP99 = math.NaN(), math.NaN(), math.NaN(), math.NaN()
	r.PlaceBefore, r.PlaceJain, r.PlaceMax, r.Reconnect, r.Balanced = math.NaN(), math.NaN(), math.NaN(), math.NaN(), math.NaN()
	if sc.Placement != nil {
		s.placementResult(&r)
		return r
	}
	r.Osc = s.oscillation()
	r.BusiestSteady, r.BusiestDown, r.Back, r.Swing, r.BackShare = math.NaN(), math.NaN(), math.NaN(), math.NaN(), math.NaN()
	if sc.Fleet {
		s.fleetResult(&r)
	}
	if sc.Faulty >= 0 {
		r.Share = s.share(sc.Faulty)
		if sc.Upstreams[sc.Faulty].JoinAt > 0 {
			s.joinResult(&r)
		} else {
			r.SettleFault, r.SettleRecovery = s.faultSettle(r.Share)
		}
	}
	return r
}

// share is upstream i's share of each second's requests, by second of the run.
func (s *sim) share(i int) []float64 {
	out := make([]float64, len(s.perSec)-1)
	for k := range out {
		if s.perSec[k] > 0 {
			out[k] = float64(s.perUp[k][i]) / float64(s.perSec[k])
		}
	}
	return out
}

// Convergence: a share has settled at the first 1 s bin from which it stays
// within settleBand of its target for settleFor.
const (
	settleBand = 0.03
	settleFor  = 5 // seconds (bins)
)

// settle returns how long after bin from the share first stays within
// settleBand of target for settleFor bins, all before bin to, in seconds;
// +Inf when it never does.
func settle(share []float64, from, to int, target float64) float64 {
	to = min(to, len(share))
	run := 0
	for k := from; k < to; k++ {
		if math.Abs(share[k]-target) <= settleBand {
			run++
			if run == settleFor {
				return float64(k + 1 - settleFor - from)
			}
		} else {
			run = 0
		}
	}
	return math.Inf(1)
}

// outage is a stretch of faults of the faulty upstream, back to back; to is
// 0 when it lasts to the end of the run.
type outage struct{ from, to time.Duration }

// outages merges the faulty upstream's faults that follow each other.
func (sc *Scenario) outages() []outage {
	var out []outage
	for _, f := range sc.Faults {
		if f.Upstream != sc.Faulty {
			continue
		}
		if n := len(out); n > 0 && out[n-1].to == f.From {
			out[n-1].to = f.To
			continue
		}
		out = append(out, outage{f.From, f.To})
	}
	return out
}

// faultSettle returns the mean settle times after the faulty upstream's
// outages start, towards a share of 0, and after they end, towards its
// share over the 10 s before the first outage (from 2 s into the run).
func (s *sim) faultSettle(share []float64) (fault, recovery float64) {
	os := s.sc.outages()
	if len(os) == 0 {
		return math.NaN(), math.NaN()
	}
	sec := func(d time.Duration) int { return int(d / time.Second) }
	end := len(share)
	first := sec(os[0].from)
	var base float64
	if lo := max(first-10, 2); lo < first {
		for _, x := range share[lo:first] {
			base += x
		}
		base /= float64(first - lo)
	}
	var nf, nr int
	for k, o := range os {
		to := end
		if o.to > 0 {
			to = sec(o.to)
		}
		fault += settle(share, sec(o.from), to, 0)
		nf++
		if o.to > 0 {
			next := end
			if k+1 < len(os) {
				next = sec(os[k+1].from)
			}
			recovery += settle(share, to, next, base)
			nr++
		}
	}
	fault /= float64(nf)
	if nr == 0 {
		return fault, math.NaN()
	}
	return fault, recovery / float64(nr)
}

// oscillation is the mean |share(t) − share(t−1)| over the measured
// window's 1 s bins and over the upstreams other than the faulty one.
func (s *sim) oscillation() float64 {
	from, to := int(s.sc.Warmup/time.Second), len(s.perSec)-1
	var sum float64
	n := 0
	for i := range s.upstreams {
		if i == s.sc.Faulty {
			continue
		}
		for k := from + 1; k < to; k++ {
			if s.perSec[k] == 0 || s.perSec[k-1] == 0 {
				continue
			}
			a := float64(s.perUp[k][i]) / float64(s.perSec[k])
			b := float64(s.perUp[k-1][i]) / float64(s.perSec[k-1])
			sum += math.Abs(a - b)
			n++
		}
	}
	if n == 0 {
		return math.NaN()
	}
	return sum / float64(n)
}

// joinPeakFor is the window after a join over which JoinPeak looks.
const joinPeakFor = 5 // seconds (bins)

func (s *sim) joinResult(r *Trial) {
	sc := s.sc
	f := sc.Faulty
	var all float64
	for _, up := range sc.Upstreams {
		all += float64(up.Workers)
	}
	capShare := float64(sc.Upstreams[f].Workers) / all
	j, end := int(sc.Upstreams[f].JoinAt/time.Second), len(r.Share)
	r.JoinRamp = math.Inf(1)
	for k := j; k < end; k++ {
		if r.Share[k] >= capShare/2 {
			r.JoinRamp = float64(k - j)
			break
		}
	}
	var peak float64
	for k := j; k < min(j+joinPeakFor, end); k++ {
		peak = max(peak, r.Share[k])
	}
	r.JoinPeak = peak / capShare
	var steady float64
	lo := max(end-20, j)
	for _, x := range r.Share[lo:end] {
		steady += x
	}
	steady /= float64(max(end-lo, 1))
	r.JoinSettle = settle(r.Share, j, end, steady)
	if len(s.latJoin) > 0 {
		slices.Sort(s.latJoin)
		r.JoinP99 = quantile(s.latJoin, 0.99)
	}
}

// placeBalanced is the largest max-over-mean of connections per unit of
// capacity at which a placement counts as balanced.
const placeBalanced = 1.25

// placement returns the balance of connections over the brokers that are
// up: max over mean and Jain's index of x_b = connections_b / capacity
// share_b, and which brokers are offered more than their capacity.
func (s *sim) placement() (maxMean, jain float64, over []bool) {
	over = make([]bool, len(s.upstreams))
	var capUp float64
	for i, up := range s.upstreams {
		if up.joined && up.mode.Kind != FastFail {
			capUp += s.caps[i]
		}
	}
	var sx, sxx, mx float64
	n := 0
	for i, up := range s.upstreams {
		if !up.joined || up.mode.Kind == FastFail {
			continue
		}
		c := s.caps[i]
		x := float64(up.conns) / (c / capUp)
		sx, sxx, mx = sx+x, sxx+x*x, max(mx, x)
		n++
		over[i] = float64(up.conns)*s.rate(s.clk.ns) > c
	}
	if n == 0 || sx == 0 {
		return math.NaN(), math.NaN(), over
	}
	return mx / (sx / float64(n)), sx * sx / (float64(n) * sxx), over
}

func (s *sim) placementResult(r *Trial) {
	r.PlaceBefore = s.beforeMax
	var over []bool
	r.PlaceMax, r.PlaceJain, over = s.placement()
	for g, c := range s.conn {
		if s.orphan[g] && c >= 0 && over[c] {
			r.Overloaded++
		}
	}
	for _, f := range s.sc.Faults {
		if f.Kind != FastFail {
			continue
		}
		r.Reconnect = max(float64(s.lastConn-int64(f.From)), 0) / 1e9
		for g, c := range s.conn {
			if s.orphan[g] && c < 0 {
				r.Reconnect = math.Inf(1) // still waiting
			}
		}
		r.Balanced = r.Reconnect
		if !(r.PlaceMax <= placeBalanced) {
			r.Balanced = math.Inf(1)
		}
		break
	}
}

// quantile is the q-quantile of sorted ns values, in seconds (nearest rank).
func quantile(sorted []int64, q float64) float64 {
	k := int(math.Ceil(q*float64(len(sorted)))) - 1
	k = min(max(k, 0), len(sorted)-1)
	return float64(sorted[k]) / 1e9
}

// back is how many seconds from bin to the faulty upstream's share over
// fleetBackFor bins first reaches share; +Inf never.
func (s *sim) back(to int, share float64) float64 {
	for k := to; k+fleetBackFor <= len(s.perSec)-1; k++ {
		var got, all int
		for j := k; j < k+fleetBackFor; j++ {
			got, all = got+s.perUp[j][s.sc.Faulty], all+s.perSec[j]
		}
		if all > 0 && float64(got)/float64(all) >= share {
			return float64(k - to)
		}
	}
	return math.Inf(1)
}

// fleetBackFor is how many 1 s bins the faulty upstream's share is averaged
// over for Back, as the cluster tier's fleet run does (5 s).
const fleetBackFor = 5

// fleetResult computes the fleet's figures of a scenario with one outage of
// the faulty upstream.
func (s *sim) fleetResult(r *Trial) {
	sc := s.sc
	os := sc.outages()
	if len(os) == 0 || os[0].to == 0 {
		return
	}
	n := len(s.upstreams)
	sec := func(d time.Duration) int { return int(d / time.Second) }
	from, to := sec(os[0].from), sec(os[0].to)
	// busiest is the largest share of one upstream over bins [a, b), over
	// the fair share of the m upstreams up then.
	busiest := func(a, b, m int) float64 {
		total := 0
		per := make([]int, n)
		for k := a; k < b && k < len(s.perSec); k++ {
			total += s.perSec[k]
			for i := range n {
				per[i] += s.perUp[k][i]
			}
		}
		if total == 0 {
			return math.NaN()
		}
		return float64(slices.Max(per)) / float64(total) * float64(m)
	}
	warm := sec(sc.Warmup)
	r.BusiestSteady = busiest(warm, from, n)
	down := n
	if sc.Faults[0].Kind == FastFail || sc.Faults[0].Kind == BlackHole {
		down = n - 1
	}
	r.BusiestDown = busiest(from+2, to, down)
	var was, all int
	for k := warm; k < from; k++ {
		was, all = was+s.perUp[k][sc.Faulty], all+s.perSec[k]
	}
	r.Back, r.BackShare = s.back(to, 0.5/float64(n)), s.back(to, 0.9*float64(was)/float64(max(all, 1)))
	r.ReconnectPeak = slices.Max(s.reconns)
	r.Swing = 0
	for i := range n {
		var sh []float64
		for k := warm; k < from; k++ {
			if s.perSec[k] > 0 {
				sh = append(sh, float64(s.perUp[k][i])/float64(s.perSec[k]))
			}
		}
		if len(sh) == 0 {
			continue
		}
		slices.Sort(sh)
		lo, hi := sh[int(0.05*float64(len(sh)-1)+0.5)], sh[int(0.95*float64(len(sh)-1)+0.5)]
		r.Swing = max(r.Swing, hi-lo)
	}
}
