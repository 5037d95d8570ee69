package plan

import (
	"math/rand/v2"
	"testing"
	"time"

	"fieldlink/sensors/profile"
)

// blocks makes n blocks of size registers, gap registers apart, from base.
func blocks(n, size, gap int, base uint16) []Item {
	var items []Item
	addr := int(base)
	for b := range n {
		for k := range size {
			items = append(items, Item{Area: profile.Holding, Address: uint16(addr + k), Words: 1, Ref: b*size + k})
		}
		addr += size + gap
	}
	return items
}

func TestPlanFillsGapsWhenCheaper(t *testing.T) {
	items := blocks(5, 4, 6, 0) // 20 registers over 44
	for _, tc := range []struct {
		name     string
		cost     Cost
		wantReqs int
	}{
		{"9600 Ts=0: gap 6 < g*=10, one request", Serial(9600, 11, 0), 1},
		{"TCP-like: overhead dominates, one request", Cost{CharTime: time.Microsecond, Turnaround: time.Millisecond}, 1},
		{"no silence or turnaround: a gap of 6 (12 chars) still beats a 13-char frame", Cost{CharTime: time.Millisecond}, 1},
	} {
		t.Run(tc.name, func(t *testing.T) {
			reqs, err := Plan(items, Limits{MaxGap: -1}, tc.cost)
			if err != nil {
				t.Fatal(err)
			}
			if len(reqs) != tc.wantReqs {
				t.Fatalf("got %d requests %v, want %d", len(reqs), reqs, tc.wantReqs)
			}
			covered := map[int]bool{}
			for _, r := range reqs {
				for _, ref := range r.Refs {
					covered[ref] = true
				}
			}
			if len(covered) != len(items) {
				t.Fatalf("plan covers %d of %d items", len(covered), len(items))
			}
		})
	}
}

func TestPlanLeavesWideGaps(t *testing.T) {
	// Gaps of 8 registers are 16 characters, more than a 13-character frame.
	reqs, _ := Plan(blocks(5, 4, 8, 0), Limits{MaxGap: -1}, Cost{CharTime: time.Millisecond})
	if len(reqs) != 5 {
		t.Fatalf("got %v, want 5 requests", reqs)
	}
}

func TestPlanBreakEvenGap(t *testing.T) {
	// Two single registers g apart at 9600 8E1 with Ts = 0: fill iff g < 10.
	c := Serial(9600, 11, 0)
	for g := 5; g <= 15; g++ {
		items := []Item{{Area: profile.Input, Address: 0, Words: 1}, {Area: profile.Input, Address: uint16(1 + g), Words: 1, Ref: 1}}
		reqs, _ := Plan(items, Limits{MaxGap: -1}, c)
		want := 1
		if g > 10 {
			want = 2
		}
		if len(reqs) != want && g != 10 { // g = 10 is the tie
			t.Errorf("gap %d: %d requests, want %d", g, len(reqs), want)
		}
	}
}

func TestPlanHonoursHolesLimitsAndMaxGap(t *testing.T) {
	items := blocks(3, 4, 2, 0) // 0-3, 6-9, 12-15
	hole := profile.Hole{Area: profile.Holding, From: 10, To: 11}
	reqs, err := Plan(items, Limits{Holes: []profile.Hole{hole}, MaxGap: -1}, Serial(9600, 11, 0))
	if err != nil {
		t.Fatal(err)
	}
	for _, r := range reqs {
		if int(r.Start) <= 11 && 10 <= int(r.Start)+int(r.Count)-1 {
			t.Fatalf("request %v crosses hole 10..11", r)
		}
	}
	if len(reqs) != 2 {
		t.Fatalf("got %v, want 0+10 and 12+4", reqs)
	}
	reqs, _ = Plan(items, Limits{MaxRegisters: 8, MaxGap: -1}, Serial(9600, 11, 0))
	for _, r := range reqs {
		if r.Count > 8 {
			t.Fatalf("request %v exceeds max 8", r)
		}
	}
	reqs, _ = Plan(items, Limits{MaxGap: 1}, Serial(9600, 11, time.Second))
	if len(reqs) != 3 {
		t.Fatalf("max_gap 1 with gaps of 2: got %v, want 3 requests", reqs)
	}
	if _, err := Plan([]Item{{Area: profile.Holding, Address: 10, Words: 1}}, Limits{Holes: []profile.Hole{hole}}, Cost{}); err == nil {
		t.Fatal("an item inside a hole must be an error")
	}
}

func TestPlanBitsAndAreasSeparate(t *testing.T) {
	items := []Item{
		{Area: profile.Coil, Address: 0, Words: 1, Ref: 0},
		{Area: profile.Coil, Address: 1999, Words: 1, Ref: 1},
		{Area: profile.Holding, Address: 0, Words: 2, Ref: 2},
		{Area: profile.Input, Address: 0, Words: 2, Ref: 3},
	}
	reqs, err := Plan(items, Limits{MaxGap: -1}, Serial(9600, 11, 500*time.Millisecond))
	if err != nil {
		t.Fatal(err)
	}
	if len(reqs) != 3 || reqs[0].Area != profile.Holding || reqs[2].Area != profile.Coil || reqs[2].Count != 2000 {
		t.Fatalf("got %v", reqs)
	}
}

func TestPlanIsOptimalAgainstBruteForce(t *testing.T) {
	rng := rand.New(rand.NewPCG(1, 2))
	for trial := range 300 {
		n := 1 + rng.IntN(11)
		var items []Item
		addr := rng.IntN(20)
		for k := range n {
			w := []int{1, 1, 2, 4}[rng.IntN(4)]
			items = append(items, Item{Area: profile.Holding, Address: uint16(addr), Words: w, Ref: k})
			addr += w + rng.IntN(30)
		}
		lim := Limits{MaxRegisters: 20 + rng.IntN(106), MaxGap: -1}
		if rng.IntN(3) == 0 {
			from := uint16(rng.IntN(addr + 1))
			lim.Holes = []profile.Hole{{Area: profile.Holding, From: from, To: from}}
			if Validate(items, lim) != nil {
				lim.Holes = nil
			}
		}
		c := Serial([]int{4800, 9600, 19200, 115200}[rng.IntN(4)], 11, time.Duration(rng.IntN(40))*time.Millisecond)
		reqs, err := Plan(items, lim, c)
		if err != nil {
			t.Fatal(err)
		}
		got := c.Total(reqs)
		want, err := exhaustive(items, lim, c)
		if err != nil {
			t.Fatal(err)
		}
		if got != want {
			t.Fatalf("trial %d: plan %v costs %v, optimum %v", trial, reqs, got, want)
		}
	}
}

func TestMaxInsertMatchesTelegrafRule(t *testing.T) {
	items := blocks(3, 2, 50, 0) // gaps of exactly 50
	if got := MaxInsert(items, Limits{}, 50); len(got) != 1 {
		t.Fatalf("fill 50 should merge gaps of 50: %v", got)
	}
	if got := MaxInsert(items, Limits{}, 49); len(got) != 3 {
		t.Fatalf("fill 49 should not merge gaps of 50: %v", got)
	}
	if got := contiguous(blocks(2, 2, 0, 0), Limits{}); len(got) != 1 {
		t.Fatalf("touching blocks are contiguous: %v", got)
	}
}

func TestSerialCostMatchesTheFormula(t *testing.T) {
	c := Serial(9600, 11, 0)
	// (20 + 2N)·tc at ≤19200 baud with Ts = 0; N = 20 → 60 tc ≈ 68.75 ms.
	got := c.Request(profile.Holding, 20)
	want := time.Duration(60 * float64(time.Second) * 11 / 9600)
	if d := got - want; d < -time.Microsecond || d > time.Microsecond {
		t.Fatalf("got %v, want %v", got, want)
	}
	if s := Serial(115200, 11, 0).Silence; s != 1750*time.Microsecond {
		t.Fatalf("t3.5 above 19200 baud is fixed at 1.75ms, got %v", s)
	}
}
