package uplink

import (
	"testing"
	"time"

	"fieldlink/internal/testtool"
)

// Each upstream says since when it is down, or fails its deliveries, for
// the status page; both clear once it is up and delivers again.
func TestDeliveryStatsSaySinceWhen(t *testing.T) {
	q := newMemQueue(100000)
	a := &fakeSender{name: "a", delay: time.Millisecond, batch: 1}
	b := &fakeSender{name: "b", delay: time.Millisecond, batch: 1}
	before := time.Now()
	a.down.Store(true)
	b.fail.Store(true)
	d, stop := newLoop(t, q, "round_robin", a, b)
	defer stop()
	of := func(name string) UpstreamCounters {
		for _, u := range d.Stats().Upstreams {
			if u.Name == name {
				return u
			}
		}
		t.Fatalf("no upstream %s", name)
		return UpstreamCounters{}
	}
	testtool.WaitFor(t, 20*time.Second, "a seen down, b failing", func() bool {
		return !of("a").DownSince.IsZero() && !of("b").FailingSince.IsZero()
	})
	downA, failB := of("a").DownSince, of("b").FailingSince
	if downA.Before(before) || failB.Before(before) || !of("b").DownSince.IsZero() || !of("a").FailingSince.IsZero() {
		t.Fatalf("a down since %v, b failing since %v (started %v); b down since %v, a failing since %v", downA, failB, before, of("b").DownSince, of("a").FailingSince)
	}
	// Still down and failing: the times stay those of the start of each.
	testtool.WaitFor(t, 20*time.Second, "b to fail again", func() bool { return of("b").LastErrorAt.After(failB) })
	if !of("a").DownSince.Equal(downA) || !of("b").FailingSince.Equal(failB) {
		t.Errorf("the times moved: a down since %v (was %v), b failing since %v (was %v)", of("a").DownSince, downA, of("b").FailingSince, failB)
	}
	a.down.Store(false)
	b.fail.Store(false)
	testtool.WaitFor(t, 20*time.Second, "a up and b delivering", func() bool {
		return of("a").DownSince.IsZero() && of("b").FailingSince.IsZero()
	})
}
