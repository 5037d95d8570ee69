package selector

import (
	"math"
	"math/bits"
	"sync"
	"sync/atomic"
	"time"
)

// outlier is the shared outlier-ejection layer: [withOutlier] puts it in
// front of any strategy, so that every strategy can be measured both bare
// and behind the same health layer (Ribbon's and Finagle's rules each
// relied on a breaker of their own; selector-anchors.md § 2). It follows
// Envoy's consecutive-5xx outlier detection
// (source/common/upstream/outlier_detection_impl.cc,
// api/envoy/config/cluster/v3/outlier_detection.proto):
//
//   - Ejection: an upstream whose consecutive failures (the table's
//     ConsecutiveFailures, counted since its last ejection or return, as
//     Envoy resets its counter at both) reach OutlierOptions.Consecutive
//     (5) is ejected.
//   - Duration: a multiplier b starts at 0, goes up by one at each ejection
//     while b·base < max + base, and down by one for every
//     OutlierOptions.Interval (10 s, Envoy's sweep) the upstream then spends
//     not ejected. An ejected upstream returns after
//     min(base·b, max): base = OutlierOptions.BaseEjection (30 s),
//     max = OutlierOptions.MaxEjection (300 s). So 30 s, 60 s, 90 s… for an
//     upstream that keeps failing as soon as it is back.
//   - Max ejection percent: an upstream is ejected only while fewer than
//     OutlierOptions.MaxEjectionPercent (10%) of the upstreams (not
//     retired, up or down) are, or none is: Envoy's "defaults to 10% but
//     will eject at least one host regardless of the value". Otherwise the
//     ejection overflows (counted) and its counter is reset as Envoy does.
//   - Panic threshold: when fewer than OutlierOptions.PanicPercent (50%) of
//     the up upstreams are not ejected, ejections are ignored, as Envoy's
//     load balancer routes to every host in panic.
//
// Ejecting means adding the ejected upstreams to the skip mask passed to the
// inner strategy, which sees nothing else. When that would leave no
// candidate (a retry that already tried every other upstream) the pick
// goes to the inner strategy with the caller's mask: ejection narrows the
// choice, it never turns a delivery away (Envoy's retry host predicates are
// likewise best-effort).
//
// The layer reads the table's statistics and its clock only (the latest
// time reading by Begin, End, Probe, Report or Snapshot, to the
// millisecond), draws no randomness, and keeps its ejection state itself.
// Ejections are decided inline, as Envoy's consecutive-5xx detection is, by
// the first pick after the table's failure count changed, and an upstream
// returns at the first pick after its ejection ended (Envoy waits for its
// next sweep); between those, a pick costs a few atomic loads and the
// inner strategy's pick. Pick does not allocate.
type outlier struct {
	inner       Strategy
	consecutive uint64
	base        int64
	maxEject    int64
	interval    int64
	maxPct      int
	panicPct    int

	ejected   atomic.Uint64 // bit i: upstream i is ejected
	seenFail  atomic.Uint64 // Table.fail at the latest sweep
	seenGen   atomic.Uint64 // Table.gen at the latest sweep
	nextDue   atomic.Int64  // earliest end of an ejection; MaxInt64 when none
	ejections atomic.Uint64
	overflows atomic.Uint64
	panics    atomic.Uint64

	mu sync.Mutex
	st [MaxUpstreams]outlierHost // guarded by mu
}

// outlierHost is the ejection state of one upstream.
type outlierHost struct {
	u       *upstream // the upstream it is about; another in the slot starts afresh
	base    uint64    // u.failures when the consecutive count was last reset
	backoff int64     // Envoy's ejectTimeBackoff
	until   int64     // end of the current ejection, table time
	since   int64     // table time from which backoff decays (last return, or last decay)
}

// OutlierOptions configures the outlier ejection of a strategy named with
// "+outlier" (see [New]). The zero value is the default
// (Envoy's defaults).
type OutlierOptions struct {
	// Consecutive is how many consecutive failures eject an upstream.
	// Default 5.
	Consecutive int
	// BaseEjection is the ejection time per ejection multiplier. Default 30 s.
	BaseEjection time.Duration
	// MaxEjection caps an ejection. Default 300 s.
	MaxEjection time.Duration
	// Interval is how long an upstream must stay back in service for its
	// ejection multiplier to go down by one (Envoy's sweep interval).
	// Default 10 s.
	Interval time.Duration
	// MaxEjectionPercent is the most upstreams, in percent of those not
	// retired, that may be ejected at once; one may always be. Default 10.
	MaxEjectionPercent int
	// PanicPercent: when fewer than this percentage of the up upstreams
	// are not ejected, ejections are ignored. Default 50; negative
	// disables panic mode.
	PanicPercent int
}

// withOutlier returns s behind the outlier-ejection layer. Its Name is
// s.Name() + "+outlier". Use it, like s, with one table.
func withOutlier(s Strategy, opt OutlierOptions) *outlier {
	o := &outlier{
		inner:       s,
		consecutive: uint64(max(opt.Consecutive, 0)),
		base:        int64(opt.BaseEjection),
		maxEject:    int64(opt.MaxEjection),
		interval:    int64(opt.Interval),
		maxPct:      opt.MaxEjectionPercent,
		panicPct:    opt.PanicPercent,
	}
	if o.consecutive == 0 {
		o.consecutive = 5
	}
	if o.base <= 0 {
		o.base = int64(30 * time.Second)
	}
	if o.maxEject <= 0 {
		o.maxEject = int64(300 * time.Second)
	}
	o.maxEject = max(o.maxEject, o.base)
	if o.interval <= 0 {
		o.interval = int64(10 * time.Second)
	}
	if o.maxPct <= 0 {
		o.maxPct = 10
	}
	o.maxPct = min(o.maxPct, 100)
	switch {
	case o.panicPct == 0:
		o.panicPct = 50
	case o.panicPct < 0:
		o.panicPct = 0
	}
	o.panicPct = min(o.panicPct, 100)
	o.nextDue.Store(math.MaxInt64)
	o.seenGen.Store(math.MaxUint64)
	return o
}

func (o *outlier) Name() string { return o.inner.Name() + "+outlier" }

func (o *outlier) Pick(t *Table, skip uint64) (int, bool) {
	now := t.lastSeen()
	if t.fail.Load() != o.seenFail.Load() || now >= o.nextDue.Load() || t.gen.Load() != o.seenGen.Load() {
		o.sweep(t, now)
	}
	ej := o.ejected.Load()
	if ej == 0 {
		return o.inner.Pick(t, skip)
	}
	live := t.Candidates(0)
	if ej&live == 0 {
		return o.inner.Pick(t, skip)
	}
	healthy := bits.OnesCount64(live &^ ej)
	if healthy*100 < o.panicPct*bits.OnesCount64(live) {
		o.panics.Add(1)
		return o.inner.Pick(t, skip)
	}
	if live&^(skip|ej) != 0 {
		skip |= ej
	}
	return o.inner.Pick(t, skip)
}

// sweep returns the upstreams whose ejection ended and ejects those whose
// consecutive failures reached the threshold, unless another goroutine is
// at it (the pick then goes on with the ejections as they are).
func (o *outlier) sweep(t *Table, now int64) {
	if !o.mu.TryLock() {
		return
	}
	defer o.mu.Unlock()
	// Store first: a failure recorded during the sweep triggers another.
	o.seenFail.Store(t.fail.Load())
	o.seenGen.Store(t.gen.Load())
	n := t.Len()
	ej := o.ejected.Load()
	hosts, count := 0, 0
	for i := range n {
		u := t.ups[i].Load()
		h := &o.st[i]
		if h.u != u {
			*h = outlierHost{u: u, since: now}
			ej &^= 1 << i
		}
		if u.retired.Load() {
			ej &^= 1 << i
			continue
		}
		hosts++
		if ej&(1<<i) != 0 {
			if now < h.until {
				count++
				continue
			}
			ej &^= 1 << i // back in service
			h.base, h.since = u.failures.Load(), now
		}
	}
	for i := range n {
		u := t.ups[i].Load()
		h := &o.st[i]
		if u.retired.Load() || ej&(1<<i) != 0 {
			continue
		}
		fails := u.failures.Load()
		if min(u.consecutive.Load(), fails-h.base) < o.consecutive {
			continue
		}
		h.base = fails // Envoy resets the counter, ejected or not
		if count > 0 && count*100 >= o.maxPct*hosts {
			o.overflows.Add(1)
			continue
		}
		if d := (now - h.since) / o.interval; d > 0 {
			h.backoff = max(h.backoff-d, 0)
		}
		if h.backoff*o.base < o.maxEject+o.base {
			h.backoff++
		}
		h.until = now + min(o.base*h.backoff, o.maxEject)
		h.since = h.until
		ej |= 1 << i
		count++
		o.ejections.Add(1)
	}
	next := int64(math.MaxInt64)
	for m := ej; m != 0; m &= m - 1 {
		next = min(next, o.st[trailingZeros(m)].until)
	}
	o.ejected.Store(ej)
	o.nextDue.Store(next)
}
