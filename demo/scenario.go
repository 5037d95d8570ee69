package demo

import (
	"context"
	"fmt"
	"slices"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"fieldlink/agent"
	"fieldlink/config"
	"fieldlink/downlink"
	"fieldlink/uplink"
)

// demoSite is one of the demo's gateways, the same [agent.Agent] that
// gateway run starts: pollers → buffer → delivery → upstreams.
type demoSite struct {
	kind     string // farm or mine
	cfg      *config.Config
	g        *agent.Agent
	produced atomic.Uint64 // packets polled
	// Packets and alarms by device, counted once stored, on the appender's
	// goroutine; read after the agent stopped.
	packets, alarms map[string]int
}

// demoRun is a running demo: its parts, its story so far, and what the live
// view remembers between ticks.
type demoRun struct {
	scr      *demoScreen
	start    time.Time
	duration time.Duration // 0: until interrupted
	brokers  []*demoBroker
	byURL    map[string]int // broker index by the upstream name the gateway gives it
	sites    []*demoSite
	ledger   *demoLedger

	mu       sync.Mutex
	events   []string // for the summary
	stopping bool

	commands int // sent so far; the scenario's goroutine's own

	// The view's goroutine's own.
	lastTick      time.Time
	lastDelivered []uint64
	lastLinks     []int // -1: not seen yet
	lastResults   int   // command results already told
}

// event tells what the demo does or sees, above the live view, and keeps it
// for the summary.
func (r *demoRun) event(format string, a ...any) {
	line := fmt.Sprintf("[%6s] ", demoSecs(time.Since(r.start))) + fmt.Sprintf(format, a...)
	r.mu.Lock()
	r.events = append(r.events, line)
	r.mu.Unlock()
	fmt.Fprintf(r.scr, "demo %s\n", line)
}

// demoStep is a moment of the demo's story.
type demoStep struct {
	at time.Duration // since the start
	do func()
}

// scenario is the story over period: broker-2 goes down for its middle
// third; in a longer run, the other two follow for a moment, so that no
// upstream is left and the buffer fills and then drains.
func (r *demoRun) scenario(period time.Duration) []demoStep {
	b1, b2, b3 := r.brokers[0], r.brokers[1], r.brokers[2]
	out, back := period/3, 2*period/3
	steps := []demoStep{{out, func() {
		b2.relay.down()
		r.event("outage: %s goes down for %v (listener closed, connections cut, new ones refused); its traffic fails over to %s and %s",
			b2.name, demoSecs(back-out), b1.name, b3.name)
	}}}
	if period >= 8*time.Second {
		at := period * 42 / 100
		d := min(max(period*8/100, time.Second), 3*time.Second)
		steps = append(steps, demoStep{at, func() {
			b1.relay.down()
			b3.relay.down()
			r.event("outage: %s and %s go down too, for %v: no upstream left, packets wait in the buffer", b1.name, b3.name, demoSecs(d))
		}}, demoStep{at + d, func() {
			if r.up(b1, b3) {
				r.event("%s and %s are back up: the gateway reconnects (after its backoff) and the buffer drains", b1.name, b3.name)
			}
		}})
	}
	// The platform opens the valve, through two brokers at once (it runs
	// once), and closes it again later.
	steps = append(steps,
		demoStep{period / 6, func() { r.command(true) }},
		demoStep{period * 6 / 10, func() { r.command(false) }})
	slices.SortStableFunc(steps, func(a, b demoStep) int { return int(a.at - b.at) })
	steps = append(steps, demoStep{back, func() {
		if r.up(b2) {
			r.event("%s is back up: the gateway reconnects after its backoff, which grew during the outage", b2.name)
		}
	}})
	return steps
}

// command publishes, as the platform, a command that opens or closes the
// farm's valve, through every broker that is up: the gateway runs it once.
// Commands are never queued, so a platform that sees no result (the
// gateway was reconnecting) sends the same command again, as platforms do:
// the id keeps it from running twice.
func (r *demoRun) command(open bool) {
	farm := r.sites[0]
	r.commands++
	cmd := downlink.Command{
		ID: fmt.Sprintf("demo-%d", r.commands), Device: "valve-1", Point: "ValveOpen", Value: downlink.Bool(open),
		IssuedAt: downlink.NewTimestamp(time.Now()), Actor: "platform:demo",
	}
	topic, err := uplink.ExpandTopic(farm.cfg.Downlink.Topic, map[string]string{"site": farm.cfg.Site.ID, "gateway": farm.cfg.Gateway.ID})
	if err != nil {
		r.event("cannot send a command: %v", err)
		return
	}
	what := "close"
	if open {
		what = "open"
	}
	for try := 1; try <= 4; try++ {
		var names []string
		for _, b := range r.brokers {
			if b.relay.isUp() && b.srv.publish(topic, cmd.JSON()) == nil {
				names = append(names, b.name)
			}
		}
		again := ""
		if try > 1 {
			again = " again, no result seen yet"
		}
		r.event("platform: %s valve-1 (command %s%s, sent through %s: it runs once)", what, cmd.ID, again, strings.Join(names, ", "))
		deadline := time.Now().Add(time.Second)
		for time.Now().Before(deadline) {
			if e := farm.g.Commands(); e != nil {
				for _, res := range e.Recent() {
					if res.ID == cmd.ID {
						return
					}
				}
			}
			time.Sleep(20 * time.Millisecond)
		}
	}
}

// up brings brokers back; it reports whether all came.
func (r *demoRun) up(bs ...*demoBroker) bool {
	ok := true
	for _, b := range bs {
		if err := b.relay.up(); err != nil {
			r.event("%s cannot come back: %v", b.name, err)
			ok = false
		}
	}
	return ok
}

// play runs the steps at their times until ctx ends.
func (r *demoRun) play(ctx context.Context, steps []demoStep) {
	for _, st := range steps {
		t := time.NewTimer(time.Until(r.start.Add(st.at)))
		select {
		case <-ctx.Done():
			t.Stop()
			return
		case <-t.C:
		}
		st.do()
	}
}

// drained reports whether every buffered packet was delivered.
func (r *demoRun) drained() bool {
	for _, s := range r.sites {
		st, _ := s.g.Delivery()
		stored, failed := s.g.Counts()
		if stored+failed < s.produced.Load() || s.g.Buffer().Len() > 0 || st.Delivered+st.DeadLettered < stored {
			return false
		}
	}
	return true
}
