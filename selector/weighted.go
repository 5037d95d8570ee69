package selector

import "sync"

// smoothWeighted is "weighted_round_robin": nginx's smooth weighted round
// robin (ngx_http_upstream_get_peer in
// src/http/ngx_http_upstream_round_robin.c). For every pick, over the
// candidates in index order:
//
//	current_i += effective_i; total += effective_i
//	if effective_i < weight_i { effective_i++ }
//	best = the first candidate with the largest current_i
//	current_best -= total
//
// Weights 5, 1, 1 give a a b a c a a, and again. An upstream that is down or
// skipped is left out of the sum, as nginx leaves out a down or tried peer.
//
// Effective weight is nginx's too: each failure of an upstream lowers it by
// weight/max_fails, with nginx's default max_fails = 1, so to 0, and it
// recovers by one at each pick. nginx lowers it when the failed request is
// freed; here it is lowered at the next pick that sees the new failure count.
// nginx's other half of max_fails, taking the peer out for fail_timeout, is
// the uplink's [Table.SetUp].
type smoothWeighted struct {
	mu    sync.Mutex
	cfg   uint64 // Table.cfg as of the weights and owners in peers
	fail  uint64 // Table.fail as of the failure counts in peers
	peers [MaxUpstreams]swrrPeer
}

// swrrPeer is nginx's per-peer state, by index.
type swrrPeer struct {
	current, effective, weight int64
	failures                   uint64    // failure count already applied to effective
	u                          *upstream // whose state this is; a new upstream in the slot starts afresh
}

func (*smoothWeighted) Name() string { return "weighted_round_robin" }

func (s *smoothWeighted) Pick(t *Table, skip uint64) (int, bool) {
	cand := t.Candidates(skip)
	if cand == 0 {
		return -1, false
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	c, n := t.cfg.Load(), t.Len() // every candidate's Add is in c, its index below n
	if c != s.cfg {
		s.cfg = c
		for i := range n {
			p, u := &s.peers[i], t.ups[i].Load()
			p.weight = t.slots[i].weight.Load()
			if p.u != u {
				*p = swrrPeer{effective: p.weight, weight: p.weight, failures: u.failures.Load(), u: u}
			}
			p.effective = min(p.effective, p.weight)
		}
	}
	if f := t.fail.Load(); f != s.fail {
		s.fail = f
		for i := range n {
			p := &s.peers[i]
			if f := p.u.failures.Load(); f != p.failures {
				p.effective = max(p.effective-p.weight*int64(f-p.failures), 0)
				p.failures = f
			}
		}
	}
	var best *swrrPeer
	bi, total := -1, int64(0)
	for m := cand; m != 0; m &= m - 1 {
		i := trailingZeros(m)
		p := &s.peers[i]
		p.current += p.effective
		total += p.effective
		if p.effective < p.weight {
			p.effective++
		}
		if best == nil || p.current > best.current {
			best, bi = p, i
		}
	}
	best.current -= total
	return bi, true
}
