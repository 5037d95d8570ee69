// Package plan groups the registers of a device into as few, and as cheap,
// read requests as the Modbus limits and the device allow.
//
// On a serial bus a request costs its bytes on the wire plus fixed overhead:
// an FC03 read of N registers takes (13+2N)·tc + 2·t3.5 + Ts, where tc is a
// character time, t3.5 the silence between frames and Ts the slave's
// turnaround. Reading g unwanted registers in a gap costs 2g·tc, one extra
// request costs (13·tc + 2·t3.5 + Ts) minus the bytes saved, so filling a
// gap pays when g < 10 + Ts/(2·tc) at ≤19200 baud. Rather than apply that
// rule greedily, [Plan] finds the plan of least total time by dynamic
// programming over the sorted registers, under the request size limits and
// never across a hole the device refuses to read.
package plan

import (
	"cmp"
	"fmt"
	"slices"
	"time"

	"fieldlink/sensors/modbus/spec"
	"fieldlink/sensors/profile"
)

// Item is one value to read: Words registers (or bits) from Address.
type Item struct {
	Area    profile.Area
	Address uint16
	Words   int
	Ref     int // caller's index, returned in Request.Refs
}

func (it Item) end() int { return int(it.Address) + it.Words - 1 }

// Request is one read: Count registers or bits from Start.
type Request struct {
	Area  profile.Area
	Start uint16
	Count uint16
	Refs  []int // the items the request serves
}

func (r Request) String() string {
	return fmt.Sprintf("%s %d+%d", r.Area, r.Start, r.Count)
}

// Limits bound a request.
type Limits struct {
	MaxRegisters int            // per register read; 0 = spec.MaxReadRegisters
	MaxBits      int            // per coil/discrete read; 0 = spec.MaxReadBits
	Holes        []profile.Hole // ranges a request must never cross
	// MaxGap, when ≥ 0, caps the unwanted registers (or bits) read between
	// two items in one request; < 0 lets the cost model decide alone.
	MaxGap int
}

// Cost is the time model of one bus.
type Cost struct {
	CharTime   time.Duration // tc: one character on the wire
	Silence    time.Duration // t3.5: the gap after every frame
	Turnaround time.Duration // Ts: the slave's think time
}

// Serial returns the cost model of a serial line: 11-bit characters when the
// frame has parity or two stop bits (8E1, 8N2), 10 bits for 8N1.
func Serial(baud, bitsPerChar int, turnaround time.Duration) Cost {
	tc := time.Duration(float64(bitsPerChar) / float64(baud) * float64(time.Second))
	silence := 1750 * time.Microsecond
	if baud <= 19200 {
		silence = tc * 7 / 2
	}
	return Cost{CharTime: tc, Silence: silence, Turnaround: turnaround}
}

// Request returns the wire-time lower bound of one read of count registers
// (or bits) from area: request and response frames, two silences, one
// turnaround.
func (c Cost) Request(area profile.Area, count int) time.Duration {
	respData := 2 * count
	if area.IsBit() {
		respData = (count + 7) / 8
	}
	chars := 8 + 5 + respData // request ADU + response ADU
	return time.Duration(chars)*c.CharTime + 2*c.Silence + c.Turnaround
}

// Total is the summed Request cost of a plan.
func (c Cost) Total(reqs []Request) time.Duration {
	var t time.Duration
	for _, r := range reqs {
		t += c.Request(r.Area, int(r.Count))
	}
	return t
}

func (l Limits) max(a profile.Area) int {
	if a.IsBit() {
		if l.MaxBits > 0 {
			return l.MaxBits
		}
		return spec.MaxReadBits
	}
	if l.MaxRegisters > 0 {
		return l.MaxRegisters
	}
	return spec.MaxReadRegisters
}

func (l Limits) crossesHole(a profile.Area, from, to int) bool {
	for _, h := range l.Holes {
		if h.Area == a && int(h.From) <= to && from <= int(h.To) {
			return true
		}
	}
	return false
}

// sorted groups items by area, each group in address order.
func sorted(items []Item) [][]Item {
	s := slices.Clone(items)
	slices.SortStableFunc(s, func(a, b Item) int {
		return cmp.Or(cmp.Compare(a.Area, b.Area), cmp.Compare(a.Address, b.Address), cmp.Compare(a.end(), b.end()))
	})
	var groups [][]Item
	for i := 0; i < len(s); {
		j := i
		for j < len(s) && s[j].Area == s[i].Area {
			j++
		}
		groups = append(groups, s[i:j])
		i = j
	}
	return groups
}

// Validate checks that every item can be read on its own.
func Validate(items []Item, lim Limits) error {
	for _, it := range items {
		if it.Words < 1 || it.Words > lim.max(it.Area) {
			return fmt.Errorf("plan: %s %d: %d words exceeds the %d a request may read", it.Area, it.Address, it.Words, lim.max(it.Area))
		}
		if it.end() > 0xFFFF {
			return fmt.Errorf("plan: %s %d: runs past address 65535", it.Area, it.Address)
		}
		if lim.crossesHole(it.Area, int(it.Address), it.end()) {
			return fmt.Errorf("plan: %s %d: lies in a hole", it.Area, it.Address)
		}
	}
	return nil
}

// Plan returns the requests of least total Cost that read every item, each
// within the limits and none crossing a hole. Items may overlap. Requests
// come in area then address order.
func Plan(items []Item, lim Limits, c Cost) ([]Request, error) {
	if err := Validate(items, lim); err != nil {
		return nil, err
	}
	var out []Request
	for _, g := range sorted(items) {
		out = append(out, planArea(g, lim, c)...)
	}
	return out, nil
}

// planArea is the dynamic programme: best[i] is the least cost of reading
// items[:i]; the last request of that plan covers items[j:i].
func planArea(items []Item, lim Limits, c Cost) []Request {
	n := len(items)
	best := make([]time.Duration, n+1)
	from := make([]int, n+1)
	area := items[0].Area
	limit := lim.max(area)
	for i := 1; i <= n; i++ {
		best[i] = -1
		end := -1
		for j := i - 1; j >= 0; j-- {
			end = max(end, items[j].end())
			// Every request over items[j:i] ends at the largest end; as j
			// falls the span only grows, so once infeasible, stop.
			start := int(items[j].Address)
			span := end - start + 1
			if span > limit || lim.crossesHole(area, start, end) {
				break
			}
			if j < i-1 && lim.MaxGap >= 0 && int(items[j+1].Address)-items[j].end()-1 > lim.MaxGap {
				break
			}
			cost := best[j] + c.Request(area, span)
			if best[i] < 0 || cost < best[i] {
				best[i], from[i] = cost, j
			}
		}
	}
	var reqs []Request
	for i := n; i > 0; i = from[i] {
		reqs = append(reqs, request(items[from[i]:i]))
	}
	slices.Reverse(reqs)
	return reqs
}

func request(items []Item) Request {
	end := -1
	refs := make([]int, len(items))
	for k, it := range items {
		end = max(end, it.end())
		refs[k] = it.Ref
	}
	return Request{Area: items[0].Area, Start: items[0].Address, Count: uint16(end - int(items[0].Address) + 1), Refs: refs}
}

// MaxInsert is Telegraf's "max_insert" optimisation, kept as a yardstick:
// walk the registers in order and extend the current request while the hole
// before the next one is at most fill registers and the request stays
// within the limit. Telegraf's default fill is 50. Holes are honoured.
func MaxInsert(items []Item, lim Limits, fill int) []Request {
	var out []Request
	for _, g := range sorted(items) {
		limit := lim.max(g[0].Area)
		i := 0
		for i < len(g) {
			j, end := i+1, g[i].end()
			for j < len(g) {
				nextEnd := max(end, g[j].end())
				if int(g[j].Address)-end-1 > fill || nextEnd-int(g[i].Address)+1 > limit ||
					lim.crossesHole(g[0].Area, int(g[i].Address), nextEnd) {
					break
				}
				end = nextEnd
				j++
			}
			out = append(out, request(g[i:j]))
			i = j
		}
	}
	return out
}

// contiguous merges only items that touch or overlap, the plan of a
// gateway that never fills gaps.
func contiguous(items []Item, lim Limits) []Request {
	return MaxInsert(items, lim, 0)
}

// exhaustive returns the least total Cost over every way of cutting the
// sorted items of each area into consecutive requests: the reference
// optimum that tests and benchmarks hold Plan to. It is exponential in the
// number of items per area (at most 24).
func exhaustive(items []Item, lim Limits, c Cost) (time.Duration, error) {
	if err := Validate(items, lim); err != nil {
		return 0, err
	}
	var total time.Duration
	for _, g := range sorted(items) {
		n := len(g)
		if n > 24 {
			return 0, fmt.Errorf("plan: %d items in one area is too many to enumerate", n)
		}
		best := time.Duration(-1)
		for mask := 0; mask < 1<<(n-1); mask++ {
			var sum time.Duration
			ok := true
			for start, i := 0, 1; i <= n && ok; i++ {
				if i < n && mask&(1<<(i-1)) == 0 {
					continue
				}
				r := request(g[start:i])
				end := int(r.Start) + int(r.Count) - 1
				gapOK := true
				for k := start + 1; k < i && lim.MaxGap >= 0; k++ {
					if int(g[k].Address)-g[k-1].end()-1 > lim.MaxGap {
						gapOK = false
					}
				}
				ok = gapOK && int(r.Count) <= lim.max(r.Area) && !lim.crossesHole(r.Area, int(r.Start), end)
				sum += c.Request(r.Area, int(r.Count))
				start = i
			}
			if ok && (best < 0 || sum < best) {
				best = sum
			}
		}
		total += best
	}
	return total, nil
}
