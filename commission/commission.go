// Package commission is the live check of a site (gateway check -live):
// what the site file cannot say about the place it runs in. Each serial
// port exists, may be opened by the service's user and is free; the
// buffer's directory exists and that user may write in it; each upstream
// answers and takes the gateway's credentials; each slave answers one
// read. Every result is a row a technician on site can act on.
package commission

import (
	"context"
	"errors"
	"fmt"
	"io"
	"os"
	"os/user"
	"strconv"
	"sync"
	"text/tabwriter"
	"time"

	"fieldlink/agent"
	"fieldlink/config"
)

// Row is one thing checked: what, whether it is ok, and why in words a
// technician can act on.
type Row struct {
	What string
	OK   bool
	Why  string
}

// Options tune a [Check]. The zero value is ready to use.
type Options struct {
	// Probe bounds each probe: a port's open, a connect, a handshake, a
	// request, a slave's read. 0 means 3 s.
	Probe time.Duration
	// Deadline bounds the whole check: what it has not reached by then is
	// reported as not checked. 0 means 30 s.
	Deadline time.Duration
	// ServiceUser is the user the service runs as, checked for when the
	// check runs as root; "" means [agent.ServiceUser].
	ServiceUser string
	// Lookup finds a user by name; nil means [user.Lookup].
	Lookup func(name string) (*user.User, error)
}

// Defaults of [Options].
const (
	DefaultProbe    = 3 * time.Second
	DefaultDeadline = 30 * time.Second
)

// defaults fills in what o leaves out.
func (o Options) defaults() Options {
	if o.Probe <= 0 {
		o.Probe = DefaultProbe
	}
	if o.Deadline <= 0 {
		o.Deadline = DefaultDeadline
	}
	if o.ServiceUser == "" {
		o.ServiceUser = agent.ServiceUser
	}
	if o.Lookup == nil {
		o.Lookup = user.Lookup
	}
	return o
}

// Check checks c, a site file that passed gateway check, against the
// machine and the network it runs on, within opt.Deadline.
func Check(ctx context.Context, c *config.Config, opt Options) []Row {
	opt = opt.defaults()
	ctx, cancel := context.WithTimeout(ctx, opt.Deadline)
	defer cancel()
	k := &checker{c: c, opt: opt}
	var rows []Row
	k.who, rows = whoRuns(opt)
	k.daemon = c.Uplink != nil && daemonRuns(ctx, c)
	if k.daemon {
		rows = append(rows, Row{"gateway service", true, "a gateway runs on this site file (its control socket " + agent.ControlPath(c) + " answers): the ports it holds show busy; stop it to check them (systemctl stop fieldlink)"})
	}
	if c.Uplink != nil {
		rows = append(rows, k.bufferDir())
	}

	// The buses, each with its port, then its slaves in turn, and the
	// upstreams, all at once: one dead thing does not hold up the others.
	var wg sync.WaitGroup
	buses := make([][]Row, len(c.Buses))
	for i := range c.Buses {
		wg.Go(func() { buses[i] = k.bus(ctx, &c.Buses[i]) })
	}
	sensors := make([]Row, len(c.SerialSensors))
	for i, s := range c.SerialSensors {
		wg.Go(func() { sensors[i] = k.serialSensor(s) })
	}
	var ups []Row
	if c.Uplink != nil {
		ups = make([]Row, len(c.Uplink.Upstreams))
		for i := range c.Uplink.Upstreams {
			wg.Go(func() { ups[i] = k.upstream(ctx, c.Uplink.Upstreams[i]) })
		}
		if c.Uplink.Registry != nil {
			ups = append(ups, Row{"upstream registry", true, "not checked: the upstreams it lists are known only once the gateway runs"})
		}
	}
	wg.Wait()
	for _, b := range buses {
		rows = append(rows, b...)
	}
	rows = append(rows, sensors...)
	return append(rows, ups...)
}

// checker holds what every check of one run needs.
type checker struct {
	c      *config.Config
	opt    Options
	who    who
	daemon bool // a gateway runs on this site file
}

// Failed is how many rows are not ok.
func Failed(rows []Row) int {
	n := 0
	for _, r := range rows {
		if !r.OK {
			n++
		}
	}
	return n
}

// Print writes rows as a table, one row per thing checked, and a last
// line that counts the failures.
func Print(w io.Writer, rows []Row) error {
	tw := tabwriter.NewWriter(w, 0, 4, 2, ' ', 0)
	fmt.Fprintf(tw, "checked\tresult\twhy\n")
	for _, r := range rows {
		res := "ok"
		if !r.OK {
			res = "FAIL"
		}
		fmt.Fprintf(tw, "%s\t%s\t%s\n", r.What, res, r.Why)
	}
	if err := tw.Flush(); err != nil {
		return err
	}
	if n := Failed(rows); n > 0 {
		_, err := fmt.Fprintf(w, "%d of %d checks failed\n", n, len(rows))
		return err
	}
	_, err := fmt.Fprintf(w, "all %d checks ok\n", len(rows))
	return err
}

// who is the user the checks are for: the service's, or the one running
// the check.
type who struct {
	name string
	uid  int
	gids []int
	self bool // the user running the check: the kernel answers for it
}

// whoRuns is the user to check for, and a row that says which and why.
func whoRuns(opt Options) (who, []Row) {
	me := who{name: strconv.Itoa(os.Getuid()), uid: os.Getuid(), self: true}
	if u, err := user.Current(); err == nil {
		me.name = u.Username
	}
	if os.Geteuid() != 0 {
		why := "checked as " + me.name + ", who runs the check"
		if me.name != opt.ServiceUser {
			why += "; the installed service runs as " + opt.ServiceUser + ": run the check as root (sudo) to check for that user"
		}
		return me, []Row{{"user", true, why}}
	}
	u, err := opt.Lookup(opt.ServiceUser)
	if err != nil {
		var unknown user.UnknownUserError
		if errors.As(err, &unknown) {
			return me, []Row{{"user", true, "the service's user " + opt.ServiceUser + " does not exist here (the Debian package creates it): checked as " + me.name + ", who runs the check"}}
		}
		return me, []Row{{"user", false, fmt.Sprintf("the service's user %s cannot be looked up (%v): checked as %s", opt.ServiceUser, err, me.name)}}
	}
	w := who{name: u.Username}
	w.uid, err = strconv.Atoi(u.Uid)
	if err != nil {
		return me, []Row{{"user", false, fmt.Sprintf("the service's user %s has uid %q, not a number: checked as %s", opt.ServiceUser, u.Uid, me.name)}}
	}
	ids, _ := u.GroupIds()
	if g, err := strconv.Atoi(u.Gid); err == nil {
		w.gids = append(w.gids, g)
	}
	for _, id := range ids {
		if g, err := strconv.Atoi(id); err == nil {
			w.gids = append(w.gids, g)
		}
	}
	w.self = w.uid == os.Getuid()
	return w, []Row{{"user", true, "checked as the service's user " + w.name}}
}

// daemonRuns reports whether a gateway answers on c's control socket.
func daemonRuns(ctx context.Context, c *config.Config) bool {
	ctx, cancel := context.WithTimeout(ctx, time.Second)
	defer cancel()
	_, err := agent.Ask(ctx, c, agent.QueryBufferStats)
	return !errors.Is(err, agent.ErrNoDaemon)
}
