package fleet

import (
	"context"
	"log/slog"
	"net/http"
	"strings"
	"sync/atomic"
	"testing"
	"time"
)

// notingTransport notes when a request's round trip has returned.
type notingTransport struct{ returned atomic.Bool }

func (n *notingTransport) RoundTrip(req *http.Request) (*http.Response, error) {
	resp, err := http.DefaultTransport.RoundTrip(req)
	n.returned.Store(true)
	return resp, err
}

// run starts the manager's Run until the test ends.
func (r *rig) run() {
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan struct{})
	go func() { defer close(done); r.m.Run(ctx) }()
	r.t.Cleanup(func() { cancel(); <-done })
}

// A configuration server that does not answer holds up no probation: the
// bundle on probation is confirmed on time while a pull still waits.
func TestSlowServerDoesNotHoldUpTheProbation(t *testing.T) {
	r := newRig(t)
	if rep := r.pull(r.bundle(1, "", "")); rep.State != StateProbation {
		t.Fatalf("%+v", rep)
	}
	tr := &notingTransport{}
	r.m.opt.Client = &http.Client{Timeout: 5 * time.Second, Transport: tr}
	r.m.opt.WatchEvery = 10 * time.Millisecond
	r.srv.mu.Lock()
	r.srv.hang, r.srv.got = true, make(chan struct{}, 1)
	r.srv.mu.Unlock()
	r.mu.Lock()
	r.mono += 2 * time.Minute // the probation is over
	r.mu.Unlock()
	r.gw.reported = make(chan Report, 16)
	r.run()
	<-r.srv.got // the first pull waits for the server
	for rep := range r.gw.reported {
		if rep.State == StateApplied && rep.Serial == 1 {
			break
		}
	}
	if tr.returned.Load() {
		t.Fatal("the probation was confirmed only after the pull to a server that does not answer gave up")
	}
}

// logTo is a slog handler that sends each message to a channel.
type logTo chan string

func (l logTo) Enabled(context.Context, slog.Level) bool { return true }
func (l logTo) Handle(_ context.Context, rec slog.Record) error {
	select {
	case l <- rec.Message:
	default:
	}
	return nil
}
func (l logTo) WithAttrs([]slog.Attr) slog.Handler { return l }
func (l logTo) WithGroup(string) slog.Handler      { return l }

// Messages on the pull topic (any broker user may send them) pull at most
// once per Options.PullEvery: one asked right after a pull waits for the
// end of the gap, and many asked meanwhile make one pull.
func TestEarlyPullsAreRateLimited(t *testing.T) {
	r := newRig(t)
	logs := make(logTo, 64)
	r.m.opt.Log = slog.New(logs)
	r.srv.mu.Lock()
	r.srv.got = make(chan struct{}, 16)
	r.srv.mu.Unlock()
	r.run()
	<-r.srv.got // the first pull, at once
	for range 20 {
		r.m.PullNow()
	}
	for {
		select {
		case <-r.srv.got:
			t.Fatal("a pull asked right after a pull fetched at once")
		case msg := <-logs:
			if strings.Contains(msg, "early pull deferred") {
				return
			}
		}
	}
}

// Once the gap is over, an early pull fetches at once.
func TestEarlyPullAfterTheGap(t *testing.T) {
	r := newRig(t)
	r.srv.mu.Lock()
	r.srv.got = make(chan struct{}, 16)
	r.srv.mu.Unlock()
	r.run()
	<-r.srv.got
	r.mu.Lock()
	r.mono += pullEvery
	r.mu.Unlock()
	r.m.PullNow()
	<-r.srv.got
}
