package loopback

import (
	"math"
	"slices"
	"time"
)

// summary is one strategy's figures in one scenario, over several blocks.
type summary struct {
	n              int
	mean, p50, p99 float64 // seconds
	appendP99      float64 // seconds: p99 of the time packets took to be stored, a measure of the machine's noise
	share          float64 // faulty share; NaN without a faulty upstream
	// joinPeak is the faulty upstream's largest share of a bin of the
	// fault window (see joinBins), over its fair share 1/upstreams: S7's
	// JoinPeak. NaN without a faulty upstream.
	joinPeak float64
	lost     int
}

// summarise pools blocks; upstreams is how many there are at the end.
func summarise(blocks []blockResult, faulty, upstreams int) summary {
	var lat, lag []time.Duration
	s := summary{share: math.NaN(), joinPeak: math.NaN()}
	picks, hits := 0, 0
	var binPicks, binHits [joinBins]int
	for _, b := range blocks {
		lat = append(lat, b.lat...)
		lag = append(lag, b.appendLag...)
		s.lost += b.lost
		picks += b.faultPicks
		hits += b.faultyHits
		for k := range joinBins {
			binPicks[k] += b.binPicks[k]
			binHits[k] += b.binHits[k]
		}
	}
	s.n = len(lat)
	if faulty >= 0 && picks > 0 {
		s.share = float64(hits) / float64(picks)
		s.joinPeak = 0
		for k := range joinBins {
			if binPicks[k] > 0 {
				s.joinPeak = max(s.joinPeak, float64(binHits[k])/float64(binPicks[k])*float64(upstreams))
			}
		}
	}
	if len(lat) == 0 {
		return s
	}
	slices.Sort(lat)
	slices.Sort(lag)
	s.appendP99 = quantile(lag, 0.99).Seconds()
	var sum float64
	for _, l := range lat {
		sum += l.Seconds()
	}
	s.mean = sum / float64(len(lat))
	s.p50 = quantile(lat, 0.50).Seconds()
	s.p99 = quantile(lat, 0.99).Seconds()
	return s
}

// quantile is the nearest-rank q-quantile of sorted.
func quantile(sorted []time.Duration, q float64) time.Duration {
	if len(sorted) == 0 {
		return 0
	}
	k := int(math.Ceil(q*float64(len(sorted)))) - 1
	return sorted[min(max(k, 0), len(sorted)-1)]
}
