package selector

import (
	"math/bits"
	"sync/atomic"
)

// roundRobin is "round_robin": the candidates in index order, one after the
// other, as Ribbon's RoundRobinRule (a counter advanced by compare-and-swap,
// modulo the number of servers).
//
// Ribbon skips a dead server by moving on to the next index, so the server
// after a dead one takes two turns. Here the position moves past the index
// picked, not by one, so the upstreams that are up share evenly. The
// position advances by one atomic add per pick, and by a second when the
// pick passed over indexes that are down or skipped; concurrent picks may
// then overlap, which only blurs the order, never the candidate rule.
type roundRobin struct {
	next atomic.Uint64 // position: the next pick is the first candidate at or after next mod Len
}

func (*roundRobin) Name() string { return "round_robin" }

func (s *roundRobin) Pick(t *Table, skip uint64) (int, bool) {
	cand := t.Candidates(skip)
	if cand == 0 {
		return -1, false
	}
	n := uint64(t.Len())
	start := (s.next.Add(1) - 1) % n
	// The first set bit at or after start, wrapping: rotate start to bit 0.
	// Only bits below n are set, so the wrap over 64 bits lands on index 0.
	i := (start + uint64(bits.TrailingZeros64(bits.RotateLeft64(cand, -int(start))))) % 64
	if passed := (i + n - start) % n; passed > 0 {
		s.next.Add(passed)
	}
	return int(i), true
}
