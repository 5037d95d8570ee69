package demo

import (
	"bytes"
	"fmt"
	"io"
	"os"
	"strings"
	"sync"
	"text/tabwriter"
	"time"

	"fieldlink/selector"
	"fieldlink/sensors"
)

// demoScreen serialises what the demo writes: packets on stdout, logs and
// events on stderr, and the live view. On a terminal the view stays at the
// bottom of stderr, redrawn in place, and everything else scrolls above it;
// elsewhere (a pipe, a file, a test) each view is printed as a block.
type demoScreen struct {
	mu     sync.Mutex
	stdout io.Writer
	stderr io.Writer
	live   bool   // stderr is a terminal: redraw the view in place
	shared bool   // stdout is that same terminal
	view   []byte // the view as last drawn (live only)
	latest []byte // the latest log line, shown under the live view
	rows   int    // lines the drawn view takes; 0 when none is drawn
	buf    []byte
}

// demoLogs is where the demo's logger writes on a terminal: a file, with
// the latest line shown under the live view, so that a burst of warnings
// (an outage's reconnects) does not push the view around.
type demoLogs struct {
	s *demoScreen
	f io.Writer
}

func (l demoLogs) Write(p []byte) (int, error) {
	n, err := l.f.Write(p)
	line := bytes.TrimSpace(p)
	if i := bytes.LastIndexByte(line, '\n'); i >= 0 {
		line = line[i+1:]
	}
	s := l.s
	s.mu.Lock()
	defer s.mu.Unlock()
	s.latest = append(s.latest[:0], line...)
	if s.rows > 0 {
		s.buf = s.draw(s.erase(s.buf[:0]))
		_, _ = s.stderr.Write(s.buf)
	}
	return n, err
}

func newDemoScreen(stdout, stderr io.Writer) *demoScreen {
	s := &demoScreen{stdout: stdout, stderr: stderr}
	if ef, ok := stderr.(*os.File); ok && os.Getenv("TERM") != "dumb" {
		if efi, err := ef.Stat(); err == nil && efi.Mode()&os.ModeCharDevice != 0 && ef.Name() != os.DevNull {
			s.live = true
			if of, ok := stdout.(*os.File); ok {
				if ofi, err := of.Stat(); err == nil {
					s.shared = os.SameFile(efi, ofi)
				}
			}
		}
	}
	return s
}

// erase appends what removes the drawn view; the cursor ends at its top.
func (s *demoScreen) erase(b []byte) []byte {
	if s.rows == 0 {
		return b
	}
	b = fmt.Appendf(b, "\x1b[%dA\r\x1b[J", s.rows)
	s.rows = 0
	return b
}

// draw appends the view. Autowrap is off while it is drawn, so that a line
// wider than the terminal is cut rather than wrapped and the view takes
// exactly one row per line: erase then finds its top.
func (s *demoScreen) draw(b []byte) []byte {
	if len(s.view) == 0 {
		return b
	}
	b = append(b, "\x1b[?7l"...)
	b = append(b, s.view...)
	s.rows = bytes.Count(s.view, []byte{'\n'})
	if len(s.latest) > 0 {
		b = append(b, "latest log: "...)
		b = append(b, s.latest...)
		b = append(b, '\n')
		s.rows++
	}
	b = append(b, "\x1b[?7h"...)
	return b
}

// packet writes one packet line to stdout.
func (s *demoScreen) packet(line []byte) {
	s.mu.Lock()
	defer s.mu.Unlock()
	if !s.shared || s.rows == 0 {
		_, _ = s.stdout.Write(line)
		return
	}
	_, _ = s.stderr.Write(s.erase(s.buf[:0]))
	_, _ = s.stdout.Write(line)
	s.buf = s.draw(s.buf[:0])
	_, _ = s.stderr.Write(s.buf)
}

// Write writes whole lines to stderr, above the view: the demo's logger and
// events write here.
func (s *demoScreen) Write(p []byte) (int, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	if !s.live || s.rows == 0 {
		return s.stderr.Write(p)
	}
	s.buf = append(s.erase(s.buf[:0]), p...)
	s.buf = s.draw(s.buf)
	if _, err := s.stderr.Write(s.buf); err != nil {
		return 0, err
	}
	return len(p), nil
}

// show replaces the view.
func (s *demoScreen) show(view []byte) {
	s.mu.Lock()
	defer s.mu.Unlock()
	if !s.live {
		_, _ = s.stderr.Write(view)
		return
	}
	s.view = append(s.view[:0], view...)
	s.buf = s.draw(s.erase(s.buf[:0]))
	_, _ = s.stderr.Write(s.buf)
}

// leave keeps the view drawn as it is; what is written next goes below it.
func (s *demoScreen) leave() {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.rows, s.view = 0, s.view[:0]
}

// demoUpstream is one broker as the live view and the summary show it,
// summed over both sites' uplinks.
type demoUpstream struct {
	delivered, failed uint64
	links             int           // sites connected to it
	latency           time.Duration // mean of the sites' latency EWMAs
	load              *selector.Load
}

// upstreams reads both uplinks' counters and selector tables.
func (r *demoRun) upstreams() []demoUpstream {
	out := make([]demoUpstream, len(r.brokers))
	lat := make([]int, len(r.brokers))
	for _, s := range r.sites {
		ds, _ := s.g.Delivery()
		for _, u := range ds.Upstreams {
			if i, ok := r.byURL[u.Name]; ok {
				out[i].delivered += u.Delivered
				out[i].failed += u.Failed
			}
		}
		for _, st := range s.g.Upstreams() {
			i, ok := r.byURL[st.Name]
			if !ok {
				continue
			}
			if st.Up && !st.Retired {
				out[i].links++
			}
			if st.LifetimeSamples > 0 {
				out[i].latency += st.LatencyEWMA
				lat[i]++
			}
			if st.Load != nil && (out[i].load == nil || st.Load.At.After(out[i].load.At)) {
				out[i].load = st.Load
			}
		}
	}
	for i := range out {
		if lat[i] > 0 {
			out[i].latency /= time.Duration(lat[i])
		}
	}
	return out
}

// demoHealth counts a site's devices by health: ok, degraded, offline (not
// polled yet counts as ok).
func demoHealth(sts []sensors.DeviceStatus) (ok, degraded, offline int) {
	for _, st := range sts {
		switch st.Health {
		case sensors.Degraded:
			degraded++
		case sensors.Offline:
			offline++
		default:
			ok++
		}
	}
	return ok, degraded, offline
}

// tick draws the live view and turns link changes into events.
func (r *demoRun) tick(now time.Time) {
	ups := r.upstreams()
	var total uint64
	for _, u := range ups {
		total += u.delivered
	}
	dt := now.Sub(r.lastTick).Seconds()
	r.lastTick = now

	var b bytes.Buffer
	elapsed := now.Sub(r.start)
	fmt.Fprintf(&b, "── fieldlink demo · %s", demoSecs(elapsed))
	if r.duration > 0 {
		fmt.Fprintf(&b, " of %v", r.duration)
	}
	fmt.Fprintf(&b, " · selector %s · %s ──\n", r.sites[0].cfg.Uplink.Selector, r.phase())
	tw := tabwriter.NewWriter(&b, 0, 4, 2, ' ', 0)
	fmt.Fprintln(tw, "UPSTREAM\tRELAY\tDELAY\tBROKER\tLINKS\tPKT/S\tDELIVERED\tSHARE\tLATENCY\tCPU\tMEM\tCONNS")
	for i, br := range r.brokers {
		u := ups[i]
		state := "up"
		if !br.relay.isUp() {
			state = "DOWN"
		}
		rate := 0.0
		if dt > 0 {
			rate = float64(u.delivered-r.lastDelivered[i]) / dt
		}
		r.lastDelivered[i] = u.delivered
		cpu, mem, conns := "-", "-", "-"
		if l := u.load; l != nil {
			cpu, mem, conns = fmt.Sprintf("%.0f%%", 100*l.CPU), fmt.Sprintf("%.0f%%", 100*l.Memory), fmt.Sprint(l.Connections)
		}
		fmt.Fprintf(tw, "%s\t%s\t+%v\t%s\t%d/%d\t%.1f\t%d\t%s\t%s\t%s\t%s\t%s\n", br.name, br.relay.addr, br.delay, state,
			u.links, len(r.sites), rate, u.delivered, demoShare(u.delivered, total), demoLatency(u.latency), cpu, mem, conns)
	}
	_ = tw.Flush()
	fmt.Fprintln(tw, "SITE\tBUFFER\tPRODUCED\tDELIVERED\tDEVICES OK/DEGRADED/OFFLINE")
	for _, s := range r.sites {
		ok, deg, off := demoHealth(s.g.Sensors().Status())
		ds, _ := s.g.Delivery()
		fmt.Fprintf(tw, "%s %s\t%d\t%d\t%d\t%d/%d/%d\n", s.kind, s.cfg.Site.ID, s.g.Buffer().Len(), s.produced.Load(),
			ds.Delivered, ok, deg, off)
	}
	_ = tw.Flush()
	r.valve(&b, now)
	r.links(ups)
	r.scr.show(b.Bytes())
}

// valve shows the farm's valve as last read and tells each command result
// as an event.
func (r *demoRun) valve(b *bytes.Buffer, now time.Time) {
	g := r.sites[0].g
	e := g.Commands()
	if e == nil {
		return
	}
	state := "not read yet"
	if p, ok := g.Sensors().Latest("valve-1", "ValveOpen", now); ok && !p.At.IsZero() {
		state = "closed"
		if p.Value.String() == "True" {
			state = "OPEN"
		}
		state += fmt.Sprintf(" (%s, read %s ago)", p.Quality, demoSecs(now.Sub(p.At)))
	}
	recent := e.Recent()
	last := "no command yet"
	if n := len(recent); n > 0 {
		last = fmt.Sprintf("last command %s: %s", recent[n-1].ID, recent[n-1].Status)
	}
	fmt.Fprintf(b, "VALVE valve-1: %s; %s\n", state, last)
	for _, res := range recent[min(r.lastResults, len(recent)):] {
		msg := fmt.Sprintf("valve-1: command %s %s", res.ID, res.Status)
		if !res.Readback.IsZero() {
			msg += ", read back " + res.Readback.String()
		}
		if res.Reason != "" {
			msg += " (" + res.Reason + ")"
		}
		r.event("%s", msg)
	}
	r.lastResults = len(recent)
}

// links turns changes in how many sites are connected to a broker into
// events.
func (r *demoRun) links(ups []demoUpstream) {
	r.mu.Lock()
	stopping := r.stopping
	r.mu.Unlock()
	for i, u := range ups {
		prev := r.lastLinks[i]
		r.lastLinks[i] = u.links
		switch {
		case prev < 0 || prev == u.links || stopping:
		case u.links == 0:
			r.event("%s: every gateway link lost; its share of the traffic goes to the others", r.brokers[i].name)
		case u.links == len(r.sites) && prev < u.links:
			r.event("%s: every gateway link up (%d/%d)", r.brokers[i].name, u.links, len(r.sites))
		}
	}
}

// phase says in a few words what the demo is doing.
func (r *demoRun) phase() string {
	r.mu.Lock()
	stopping := r.stopping
	r.mu.Unlock()
	var down []string
	for _, b := range r.brokers {
		if !b.relay.isUp() {
			down = append(down, b.name)
		}
	}
	switch {
	case stopping:
		return "stopping: delivering what is left in the buffer"
	case len(down) == len(r.brokers):
		return "ALL BROKERS DOWN: packets wait in the buffer"
	case len(down) > 0:
		return strings.Join(down, ", ") + " DOWN: failing over"
	}
	return "all brokers up"
}

// summary prints the end-of-run report.
func (r *demoRun) summary(w io.Writer, why string) error {
	ups := r.upstreams()
	var total uint64
	for _, u := range ups {
		total += u.delivered
	}
	fmt.Fprintf(w, "\nfieldlink demo summary (%s, %s):\n", demoSecs(time.Since(r.start)), why)
	r.mu.Lock()
	outages := false
	for _, e := range r.events {
		fmt.Fprintf(w, "  %s\n", e)
		outages = outages || strings.Contains(e, "outage:")
	}
	r.mu.Unlock()
	fmt.Fprintln(w)
	tw := tabwriter.NewWriter(w, 0, 4, 2, ' ', 0)
	fmt.Fprintln(tw, "UPSTREAM\tRELAY\tDELAY\tDELIVERED\tSHARE\tFAILED BATCHES\tLATENCY\tRECEIVED\tLOAD REPORTS")
	for i, b := range r.brokers {
		u := ups[i]
		fmt.Fprintf(tw, "%s\t%s\t+%v\t%d\t%s\t%d\t%s\t%d\t%d\n", b.name, b.relay.addr, b.delay, u.delivered, demoShare(u.delivered, total),
			u.failed, demoLatency(u.latency), b.received.Load(), b.reports.Load())
	}
	if err := tw.Flush(); err != nil {
		return err
	}
	fmt.Fprintln(w)
	var produced, stored, delivered, left, failed uint64
	fmt.Fprintln(tw, "SITE\tGATEWAY\tPRODUCED\tBUFFERED\tDELIVERED\tLEFT IN BUFFER\tNOT BUFFERED\tBUFFER COMMITS")
	for _, s := range r.sites {
		st, _ := s.g.Delivery()
		sstored, sfailed := s.g.Counts()
		bs, _ := s.g.Buffer().Stats()
		l := uint64(s.g.Buffer().Len())
		fmt.Fprintf(tw, "%s %s\t%s\t%d\t%d\t%d\t%d\t%d\t%d\n", s.kind, s.cfg.Site.ID, s.cfg.Gateway.ID, s.produced.Load(),
			sstored, st.Delivered, l, sfailed, bs.Commits)
		produced += s.produced.Load()
		stored += sstored
		delivered += st.Delivered
		left += l
		failed += sfailed
	}
	if err := tw.Flush(); err != nil {
		return err
	}
	distinct, dups := r.ledger.counts()
	fmt.Fprintf(w, "\npackets: produced %d, buffered %d, delivered %d, left in the buffer %d; the brokers took %d distinct packets (%d twice: delivery is at least once)\n",
		produced, stored, delivered, left, distinct, dups)
	switch {
	case left == 0 && failed == 0 && uint64(distinct) >= stored:
		if outages {
			fmt.Fprintf(w, "nothing lost: every packet produced reached a broker, through the outages\n")
		} else {
			fmt.Fprintf(w, "nothing lost: every packet produced reached a broker (stopped before the first outage)\n")
		}
	case left > 0:
		fmt.Fprintf(w, "%d packets were still in the buffer at exit: the next run of the gateway would deliver them\n", left)
	}
	fmt.Fprintln(w)

	fmt.Fprintln(tw, "BUS\tDEVICE\tHEALTH\tPOLLS\tERRORS\tPACKETS\tALARMS\tLAST ERROR")
	for _, s := range r.sites {
		for _, st := range s.g.Sensors().Status() {
			lastErr := st.LastError
			if len(lastErr) > 60 {
				lastErr = "…" + lastErr[len(lastErr)-59:]
			}
			fmt.Fprintf(tw, "%s\t%s\t%s\t%d\t%d\t%d\t%d\t%s\n", st.Bus, st.Name, st.Health, st.Polls, st.Errors, s.packets[st.Name], s.alarms[st.Name], lastErr)
		}
	}
	return tw.Flush()
}

func demoShare(n, total uint64) string {
	if total == 0 {
		return "-"
	}
	return fmt.Sprintf("%.0f%%", 100*float64(n)/float64(total))
}

func demoLatency(d time.Duration) string {
	switch {
	case d <= 0:
		return "-"
	case d < 10*time.Millisecond:
		return d.Round(100 * time.Microsecond).String()
	}
	return d.Round(time.Millisecond).String()
}

// demoSecs shows a time of the run to the tenth of a second.
func demoSecs(d time.Duration) string {
	return fmt.Sprintf("%.1fs", d.Seconds())
}
