package selector

// leastConn is "least_conn": the candidate with the fewest deliveries in
// flight per unit of weight, in_flight_i / weight_i, compared by
// cross-multiplication as nginx's least_conn
// (ngx_http_upstream_least_conn_module.c) and LVS's wlc do. With equal
// weights it is the fewest in flight, Ribbon's BestAvailableRule.
//
// Ties are broken uniformly at random. Ribbon sends them to the first server
// in the list and nginx through smooth weighted round robin; a random choice
// keeps identical gateways from herding onto the same upstream and needs no
// shared state between concurrent picks.
type leastConn struct{}

func (leastConn) Name() string { return "least_conn" }

func (leastConn) Pick(t *Table, skip uint64) (int, bool) {
	cand := t.Candidates(skip)
	if cand == 0 {
		return -1, false
	}
	first := trailingZeros(cand)
	ties := uint64(1) << first
	bestC, bestW := inflight(t.slots[first].state.Load()), t.slots[first].weight.Load()
	for m := cand & (cand - 1); m != 0; m &= m - 1 {
		i := trailingZeros(m) & (MaxUpstreams - 1)
		c, w := inflight(t.slots[i].state.Load()), t.slots[i].weight.Load()
		if l, r := c*bestW, bestC*w; l < r {
			ties, bestC, bestW = 1<<i, c, w
		} else if l == r {
			ties |= 1 << i
		}
	}
	return pickTie(t, ties), true
}
