// Package scan is gateway scan: it sweeps a bus's slave ids (at each baud
// rate on a serial line) for devices that answer, identifies each one
// found against the profiles, and writes a site-file fragment for them.
// Every request it sends is bounded by a timeout, and it says beforehand
// how long the worst case takes.
package scan

import (
	"context"
	"errors"
	"fmt"
	"io"
	"net/url"
	"strconv"
	"strings"
	"time"

	"fieldlink/internal/words"
	"fieldlink/sensors"
	"fieldlink/sensors/modbus"
	"fieldlink/sensors/plan"
	"fieldlink/sensors/profile"
)

// Options are a scan's settings; gateway scan's flags.
type Options struct {
	// URL is the bus; on a serial line its baud is replaced by each of
	// Bauds, a comma-separated list.
	URL   string
	Bauds string
	// IDs are the slave ids to try (see [ParseIDs]).
	IDs []byte
	// Timeout bounds each request.
	Timeout time.Duration
	// Area and Address are the register the sweep reads.
	Area    profile.Area
	Address uint16
	// Identify asks each device found what it is and matches it, and its
	// registers, against Profiles; then the fragment is written.
	Identify bool
	Profiles profile.Set
	// Out takes what was found and the fragment; Log the progress.
	Out, Log io.Writer
}

var (
	// ErrStopped is a scan stopped by its context; Run said where on Log.
	ErrStopped = errors.New("scan: stopped")
	// ErrNoDevice is a scan that found nothing (the command prints it
	// after its name, hence no prefix).
	ErrNoDevice = errors.New("no device answered")
)

// Run scans as o says.
func Run(ctx context.Context, o Options) error {
	ep, err := modbus.ParseURL(o.URL)
	if err != nil {
		return err
	}
	urls := []string{o.URL}
	if ep.Scheme == "rtu" {
		urls = nil
		for _, b := range strings.Split(o.Bauds, ",") {
			if _, err := strconv.Atoi(strings.TrimSpace(b)); err != nil {
				return fmt.Errorf("-bauds: %q is not a number", b)
			}
			u, _ := url.Parse(o.URL)
			q := u.Query()
			q.Set("baud", strings.TrimSpace(b))
			u.RawQuery = q.Encode()
			urls = append(urls, u.String())
		}
	}
	// Every request the scan sends is bounded by -timeout: the sweep sends
	// one per id and line setting (and is given one more, for opening the
	// line), identifying a device found one per request of every profile
	// and up to 8 for its identification. Say how long the worst case
	// takes, and hold each part to it.
	perURL := time.Duration(len(o.IDs)+1) * o.Timeout
	perDevice := time.Duration(IdentifyRequests(o.Profiles)) * o.Timeout
	then := ""
	if o.Identify {
		then = fmt.Sprintf(", then up to %v for each device found, to identify it (%s; -identify=false skips it)",
			ceilSecond(perDevice), words.Count(IdentifyRequests(o.Profiles), "request"))
	}
	fmt.Fprintf(o.Log, "trying %s at %s: at most about %v to sweep (a silent id costs -timeout %v)%s; -slaves and -bauds narrow it, Ctrl-C stops\n",
		words.Count(len(o.IDs), "slave id"), words.Count(len(urls), "line setting"), ceilSecond(time.Duration(len(urls))*perURL), o.Timeout, then)
	found := 0
	stopped := func(u string, id byte) error {
		fmt.Fprintf(o.Log, "scan stopped at slave %d of %s: %s found so far\n", id, u, words.Count(found, "device"))
		return ErrStopped
	}
	var fragments []Bus
	for _, u := range urls {
		frag := Bus{URL: u}
		client, err := modbus.Open(u, modbus.Options{Timeout: o.Timeout})
		if err != nil {
			return err
		}
		ep, _ := modbus.ParseURL(u)
		fmt.Fprintf(o.Log, "scanning %s (%s), %d slave ids...\n", u, ep.LineSettings(), len(o.IDs))
		sweep, cancel := context.WithTimeout(ctx, perURL)
		res, at, err := sensors.Scan(sweep, client, o.IDs, o.Area, o.Address, func(a sensors.Answer) {
			if a.Exception == nil {
				fmt.Fprintf(o.Out, "found slave %d at %s (%s): answered a read of %s %d\n", a.Slave, u, ep.LineSettings(), o.Area, o.Address)
			} else {
				fmt.Fprintf(o.Out, "found slave %d at %s (%s): answered with exception %d (%v)\n", a.Slave, u, ep.LineSettings(), a.Exception.ExceptionCode, a.Err)
			}
			found++
			frag.Slaves = append(frag.Slaves, a.Slave)
		})
		cancel()
		if err != nil && ctx.Err() != nil {
			client.Close()
			return stopped(u, at)
		}
		if err != nil {
			fmt.Fprintf(o.Log, "  the sweep of %s stopped at slave %d, at its bound of %v\n", u, at, perURL)
		}
		garbled := res.Garbled
		if o.Identify {
			for _, id := range frag.Slaves {
				one, cancel := context.WithTimeout(ctx, perDevice)
				who, err := sensors.Identify(one, client, id, o.Profiles)
				cancel()
				if ctx.Err() != nil {
					client.Close()
					return stopped(u, id)
				}
				if err != nil {
					fmt.Fprintf(o.Log, "slave %d at %s: %v\n", id, u, err)
				}
				frag.IDs = append(frag.IDs, who)
			}
		}
		client.Close()
		if len(frag.Slaves) > 0 {
			fragments = append(fragments, frag)
		}
		if garbled > 0 {
			fmt.Fprintf(o.Log, "  %d garbled replies at %s: a device may be there at another baud rate or parity\n", garbled, ep.LineSettings())
		}
	}
	if found == 0 {
		return ErrNoDevice
	}
	if o.Identify {
		WriteFragment(o.Out, fragments)
	}
	return nil
}

// IdentifyRequests is how many requests identifying one device may send:
// up to 8 for its identification (43/14), then one per request of every
// Modbus profile of set.
func IdentifyRequests(set profile.Set) int {
	n := 8
	for _, name := range set.Names() {
		p := set[name]
		if p.IsLine() || len(p.Registers) == 0 {
			continue
		}
		reqs, _ := sensors.PlanDevice(p, -1, plan.Cost{})
		n += len(reqs)
	}
	return n
}

// ceilSecond rounds d up to the second from a second on: a bound said
// rounded down would not hold.
func ceilSecond(d time.Duration) time.Duration {
	if d < time.Second {
		return d
	}
	return (d + time.Second - 1).Truncate(time.Second)
}

// Bus is what a scan found at one line setting.
type Bus struct {
	URL    string
	Slaves []byte
	IDs    []sensors.Identity // by slave, when identified
}

// WriteFragment writes the site file's buses for what a scan found: each
// slave with the profile it matched best and how sure, the other
// candidates in a comment. Slaves that match no profile are comments.
func WriteFragment(w io.Writer, frags []Bus) {
	fmt.Fprintf(w, "\n# A site-file fragment for what answered: check the profiles, rename the devices, then gateway check.\nbuses:\n")
	for i, f := range frags {
		fmt.Fprintf(w, "  - name: bus-%d\n    url: %q\n    devices:\n", i+1, f.URL)
		listed := 0
		for k, slave := range f.Slaves {
			who := f.IDs[k]
			if who.ID != nil {
				fmt.Fprintf(w, "      # slave %d identifies itself: vendor %q, product %q, model %q, revision %q\n",
					slave, who.ID.Vendor(), who.ID.Product(), who.ID.Model(), who.ID[modbus.ObjectMajorMinorRevision])
			}
			if len(who.Matches) == 0 {
				fmt.Fprintf(w, "      # slave %d: no profile's registers answer; write a profile for it (gateway read helps)\n", slave)
				continue
			}
			m := who.Matches[0]
			fmt.Fprintf(w, "      - {name: %s-%d, profile: %s, slave: %d}   # %s: %s\n", m.Profile.Name, slave, m.Profile.Name, slave, m.Confidence, m.Why)
			listed++
			var others []string
			for _, o := range who.Matches[1:] {
				if len(others) == 4 {
					others = append(others, fmt.Sprintf("and %d more", len(who.Matches)-5))
					break
				}
				others = append(others, fmt.Sprintf("%s (%s)", o.Profile.Name, o.Confidence))
			}
			if len(others) > 0 {
				fmt.Fprintf(w, "      #   its registers also read as: %s\n", strings.Join(others, ", "))
			}
		}
		if listed == 0 {
			fmt.Fprintf(w, "      []\n")
		}
	}
}

// ParseIDs parses "1-10,32" into slave ids.
func ParseIDs(s string) ([]byte, error) {
	var ids []byte
	for _, part := range strings.Split(s, ",") {
		lo, hi, isRange := strings.Cut(strings.TrimSpace(part), "-")
		a, err1 := strconv.Atoi(lo)
		b := a
		var err2 error
		if isRange {
			b, err2 = strconv.Atoi(hi)
		}
		if err1 != nil || err2 != nil || a < 1 || b > 247 || a > b {
			return nil, fmt.Errorf("%q: want ids 1..247 like 1-10,32", part)
		}
		for id := a; id <= b; id++ {
			ids = append(ids, byte(id))
		}
	}
	return ids, nil
}
