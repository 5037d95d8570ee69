package selector

import "math/bits"

// random is "random": uniform over the candidates.
type random struct{}

func (random) Name() string { return "random" }

func (random) Pick(t *Table, skip uint64) (int, bool) {
	cand := t.Candidates(skip)
	if cand == 0 {
		return -1, false
	}
	return nthBit(cand, t.intN(bits.OnesCount64(cand))), true
}
