package selector

import (
	"errors"
	"testing"
	"time"
)

var errOutlier = errors.New("outlier test failure")

// fail records n failed deliveries to upstream i (1 ms each).
func fail(tb *Table, c *testClock, i, n int) { feed(tb, c, i, n, time.Millisecond, 0, errOutlier) }

// at sets the clock to d and makes the table read it.
func at(tb *Table, c *testClock, d time.Duration) {
	c.Set(d)
	tb.Probe(0, time.Millisecond, nil)
}

func TestOutlierEjectionAndBackoff(t *testing.T) {
	tb, c := newTestTable(1, 1, 1, 1)
	o := withOutlier(new(roundRobin), OutlierOptions{})
	if o.Name() != "round_robin+outlier" {
		t.Fatalf("Name %q", o.Name())
	}
	fail(tb, c, 1, 4)
	o.Pick(tb, 0)
	if o.ejected.Load() != 0 {
		t.Fatalf("4 consecutive failures: ejected %#b, want none", o.ejected.Load())
	}
	fail(tb, c, 1, 1)
	at(tb, c, 0)
	if got := letters(picks(t, o, tb, 6)); got != "cdacda" || o.ejected.Load() != 1<<1 || o.ejections.Load() != 1 {
		t.Fatalf("5 consecutive failures: %s, ejected %#b; want cdacda (round robin, after one pick), u1", got, o.ejected.Load())
	}
	// First ejection: 30 s × 1.
	at(tb, c, 30*time.Second-time.Millisecond)
	if o.Pick(tb, 0); o.ejected.Load() != 1<<1 {
		t.Fatalf("29.999 s later: ejected %#b, want u1", o.ejected.Load())
	}
	at(tb, c, 30*time.Second)
	if o.Pick(tb, 0); o.ejected.Load() != 0 {
		t.Fatalf("30 s later: ejected %#b, want none", o.ejected.Load())
	}
	// Back with its count reset (as Envoy): four more failures do not
	// eject it, though the table counts 9 consecutive.
	fail(tb, c, 1, 4)
	if o.Pick(tb, 0); o.ejected.Load() != 0 || tb.Snapshot()[1].ConsecutiveFailures != 9 {
		t.Fatalf("4 failures after return: ejected %#b, want none", o.ejected.Load())
	}
	// The fifth: ejected again, within 10 s of return, so the multiplier
	// is 2: 60 s.
	fail(tb, c, 1, 1)
	at(tb, c, 35*time.Second)
	o.Pick(tb, 0)
	at(tb, c, 95*time.Second-time.Millisecond)
	if o.Pick(tb, 0); o.ejected.Load() != 1<<1 {
		t.Fatalf("second ejection, 59.999 s: ejected %#b, want u1", o.ejected.Load())
	}
	at(tb, c, 95*time.Second)
	if o.Pick(tb, 0); o.ejected.Load() != 0 {
		t.Fatalf("second ejection, 60 s: ejected %#b, want none", o.ejected.Load())
	}
	// 25 s healthy: the multiplier drops by 2 (one per 10 s) to 0, then
	// goes to 1 at the next ejection: 30 s again.
	at(tb, c, 120*time.Second)
	fail(tb, c, 1, 5)
	at(tb, c, 120*time.Second)
	o.Pick(tb, 0)
	at(tb, c, 150*time.Second-time.Millisecond)
	if o.Pick(tb, 0); o.ejected.Load() != 1<<1 {
		t.Fatalf("third ejection: ejected %#b, want u1", o.ejected.Load())
	}
	at(tb, c, 150*time.Second)
	if o.Pick(tb, 0); o.ejected.Load() != 0 || o.ejections.Load() != 3 {
		t.Fatalf("third ejection after 30 s: ejected %#b (%d ejections), want none (3)", o.ejected.Load(), o.ejections.Load())
	}
}

func TestOutlierMaxEjectionCap(t *testing.T) {
	// An upstream that fails again as soon as it is back: 30, 60, 90 s …
	// capped at 300 s (Envoy: the multiplier stops growing once
	// base·b ≥ max + base, at b = 11).
	tb, c := newTestTable(1, 1, 1, 1)
	o := withOutlier(new(roundRobin), OutlierOptions{})
	var now time.Duration
	var got []time.Duration
	for range 12 {
		fail(tb, c, 0, 5)
		at(tb, c, now)
		o.Pick(tb, 0)
		start := now
		for o.ejected.Load() != 0 {
			now += time.Second
			at(tb, c, now)
			o.Pick(tb, 0)
		}
		got = append(got, now-start)
	}
	want := []time.Duration{30, 60, 90, 120, 150, 180, 210, 240, 270, 300, 300, 300}
	for k := range want {
		if got[k] != want[k]*time.Second {
			t.Fatalf("ejection times %v, want %v s", got, want)
		}
	}
}

func TestOutlierMaxEjectionPercent(t *testing.T) {
	// Ten upstreams, 10%: one at a time; the second overflows.
	tb, c := newTestTable(1, 1, 1, 1, 1, 1, 1, 1, 1, 1)
	o := withOutlier(new(roundRobin), OutlierOptions{})
	fail(tb, c, 2, 5)
	fail(tb, c, 7, 5)
	o.Pick(tb, 0)
	if o.ejected.Load() != 1<<2 || o.overflows.Load() != 1 {
		t.Fatalf("10%% of 10: ejected %#b, overflows %d; want u2, 1", o.ejected.Load(), o.overflows.Load())
	}
	// 20%: both.
	tb, c = newTestTable(1, 1, 1, 1, 1, 1, 1, 1, 1, 1)
	o = withOutlier(new(roundRobin), OutlierOptions{MaxEjectionPercent: 20})
	fail(tb, c, 2, 5)
	fail(tb, c, 7, 5)
	fail(tb, c, 8, 5)
	o.Pick(tb, 0)
	if o.ejected.Load() != 1<<2|1<<7 || o.overflows.Load() != 1 {
		t.Fatalf("20%% of 10: ejected %#b, overflows %d; want u2 and u7, 1", o.ejected.Load(), o.overflows.Load())
	}
	// Three upstreams, 10% is a third of one: one may be ejected anyway.
	tb, c = newTestTable(1, 1, 1)
	o = withOutlier(new(roundRobin), OutlierOptions{})
	fail(tb, c, 0, 5)
	fail(tb, c, 1, 5)
	o.Pick(tb, 0)
	if o.ejected.Load() != 1<<0 {
		t.Fatalf("10%% of 3: ejected %#b, want u0 (at least one)", o.ejected.Load())
	}
}

func TestOutlierPanicThreshold(t *testing.T) {
	tb, c := newTestTable(1, 1, 1, 1)
	o := withOutlier(new(roundRobin), OutlierOptions{MaxEjectionPercent: 100})
	fail(tb, c, 0, 5)
	fail(tb, c, 1, 5)
	// 2 of 4 healthy: 50% is not below 50%, ejections hold.
	if got := letters(picks(t, o, tb, 4)); got != "cdcd" || o.panics.Load() != 0 {
		t.Fatalf("2 of 4 ejected: %s, %d panics; want cdcd, 0", got, o.panics.Load())
	}
	// One more: 1 of 4 healthy, 25% < 50%: panic, every up upstream.
	fail(tb, c, 2, 5)
	got := letters(picks(t, o, tb, 4))
	if o.ejected.Load() != 0b111 || got != "abcd" || o.panics.Load() != 4 {
		t.Fatalf("3 of 4 ejected: ejected %#b, %s, %d panics; want 0b111, abcd, 4", o.ejected.Load(), got, o.panics.Load())
	}
	// Only up upstreams count: with u3 down, 0 of 3 healthy, still panic;
	// and a down upstream is never picked.
	tb.SetUp(3, false)
	if got := letters(picks(t, o, tb, 3)); got != "abc" {
		t.Fatalf("u3 down, all ejected: %s, want abc", got)
	}
	// Panic threshold disabled: ejections hold down to one healthy
	// upstream, and the inner strategy is asked with it alone.
	tb, c = newTestTable(1, 1, 1, 1)
	o = withOutlier(new(roundRobin), OutlierOptions{MaxEjectionPercent: 100, PanicPercent: -1})
	fail(tb, c, 0, 5)
	fail(tb, c, 1, 5)
	fail(tb, c, 2, 5)
	if got := letters(picks(t, o, tb, 3)); got != "ddd" || o.panics.Load() != 0 {
		t.Fatalf("no panic mode: %s, want ddd", got)
	}
}

func TestOutlierRetryFallsBackToEjected(t *testing.T) {
	tb, c := newTestTable(1, 1, 1)
	o := withOutlier(new(roundRobin), OutlierOptions{})
	fail(tb, c, 1, 5)
	o.Pick(tb, 0)
	if o.ejected.Load() != 1<<1 {
		t.Fatalf("ejected %#b, want u1", o.ejected.Load())
	}
	// A retry that tried u0 and u2: u1 is all that is left.
	if i, ok := o.Pick(tb, 1<<0|1<<2); !ok || i != 1 {
		t.Fatalf("u0 and u2 tried: Pick = %d, %v; want 1, true", i, ok)
	}
	if _, ok := o.Pick(tb, 0b111); ok {
		t.Fatal("everything tried: Pick found one")
	}
}

func TestOutlierRetiredAndReused(t *testing.T) {
	tb, c := newTestTable(1, 1, 1)
	o := withOutlier(new(roundRobin), OutlierOptions{})
	fail(tb, c, 1, 5)
	o.Pick(tb, 0)
	tb.Retire(1)
	o.Pick(tb, 0)
	if o.ejected.Load() != 0 {
		t.Fatalf("retired: ejected %#b, want none", o.ejected.Load())
	}
	tb.Add("u1", 1) // back, with its history: the count was reset at ejection
	if o.Pick(tb, 0); o.ejected.Load() != 0 {
		t.Fatalf("back: ejected %#b, want none", o.ejected.Load())
	}
}

func TestOutlierNoAlloc(t *testing.T) {
	tb, c := newTestTable(1, 1, 1, 1)
	o := withOutlier(newP2CEWMA(StrategyOptions{}), OutlierOptions{})
	fail(tb, c, 1, 5)
	o.Pick(tb, 0)
	if a := testing.AllocsPerRun(1000, func() { o.Pick(tb, 0) }); a != 0 {
		t.Fatalf("Pick allocates %.1f times", a)
	}
}
