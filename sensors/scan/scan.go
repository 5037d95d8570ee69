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
	"slices"
	"strconv"
	"strings"
	"time"

	gm "github.com/goburrow/modbus"

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
	// Timeout bounds each request; 0 is [DefaultTimeout] at each line
	// setting.
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
	// ErrOnlyLate is a scan at which devices answered, but only after
	// -timeout; Run named them and the -timeout to give on Log.
	ErrOnlyLate = errors.New("no device answered within -timeout, some did later: scan again with the -timeout suggested above")
)

// answerTime is how long a device is given to start answering, on top of
// its frames' time on the wire.
const answerTime = 100 * time.Millisecond

// DefaultTimeout is a request's timeout at ep when -timeout is not given:
// [answerTime] for the device to answer, plus, on a serial line, the wire
// time of the request (8 characters) and of a reply of replyLen
// characters, with the silence before each, rounded up to the
// millisecond. At 2400 baud a one-register read and its silences take
// 95 ms (8N1), and a fixed 100 ms left a device 5 ms to answer.
func DefaultTimeout(ep modbus.Endpoint, replyLen int) time.Duration {
	if !ep.Serial() {
		return answerTime
	}
	d := answerTime + time.Duration(8+replyLen)*modbus.CharTime(ep.Baud, ep.BitsPerChar()) + 2*modbus.Silence(ep.Baud)
	return (d + time.Millisecond - 1).Truncate(time.Millisecond)
}

const (
	// probeReplyLen is the reply to the sweep's read of one register.
	probeReplyLen = 7
	// largestReplyLen is the largest RTU frame, as an identification's
	// reads may be.
	largestReplyLen = 256
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
	// line), then a device found is read ConfirmReads more times, to tell
	// a line setting with clean replies from one with garbled ones, and
	// identifying it sends one per request of every profile and up to 8
	// for its identification. Say how long the worst case takes, and hold
	// each part to it.
	// Each line setting has its timeouts: -timeout, or by default one
	// that grows with the frames' wire time at the setting's baud.
	probeTimeout := func(ep modbus.Endpoint) time.Duration {
		if o.Timeout > 0 {
			return o.Timeout
		}
		return DefaultTimeout(ep, probeReplyLen)
	}
	identifyTimeout := func(ep modbus.Endpoint) time.Duration {
		if o.Timeout > 0 {
			return o.Timeout
		}
		return DefaultTimeout(ep, largestReplyLen)
	}
	var sweepAll, probeMin, probeMax, identifyMax time.Duration
	for _, u := range urls {
		ep, err := modbus.ParseURL(u)
		if err != nil {
			return err
		}
		p := probeTimeout(ep)
		sweepAll += time.Duration(len(o.IDs)+1) * p
		if probeMin == 0 || p < probeMin {
			probeMin = p
		}
		probeMax, identifyMax = max(probeMax, p), max(identifyMax, identifyTimeout(ep))
	}
	perDevice := time.Duration(IdentifyRequests(o.Profiles)) * identifyMax
	perConfirm := time.Duration(ConfirmReads) * probeMax
	costs := probeMin.String()
	if probeMax != probeMin {
		costs = fmt.Sprintf("%v to %v by baud", probeMin, probeMax)
	}
	then := fmt.Sprintf(", then up to %v for each device found, to count its clean replies (%s)",
		ceilSecond(perConfirm), words.Count(ConfirmReads, "read"))
	if o.Identify {
		then = fmt.Sprintf(", then up to %v for each device found, to count its clean replies and identify it (%s; -identify=false skips identifying)",
			ceilSecond(perConfirm+perDevice), words.Count(ConfirmReads+IdentifyRequests(o.Profiles), "request"))
	}
	fmt.Fprintf(o.Log, "trying %s at %s: at most about %v to sweep (a silent id costs -timeout %s)%s; -slaves and -bauds narrow it, Ctrl-C stops\n",
		words.Count(len(o.IDs), "slave id"), words.Count(len(urls), "line setting"), ceilSecond(sweepAll), costs, then)
	found, late := 0, 0
	stopped := func(u string, id byte) error {
		fmt.Fprintf(o.Log, "scan stopped at slave %d of %s: %s found so far\n", id, u, words.Count(found, "device"))
		return ErrStopped
	}
	// Sweep every line setting first: the port is one bus, at the one
	// setting whose replies were cleanest, and only that one is identified.
	var answered []Bus
	for _, u := range urls {
		frag := Bus{URL: u}
		ep, _ := modbus.ParseURL(u)
		timeout := probeTimeout(ep)
		perURL := time.Duration(len(o.IDs)+1) * timeout
		client, err := modbus.Open(u, modbus.Options{Timeout: timeout})
		if err != nil {
			return err
		}
		frag.Setting = ep.LineSettings()
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
		frag.Clean, frag.Garbled = len(res.Answers), res.Garbled
		late += sayLate(o.Log, res.Late, timeout)
		for _, id := range frag.Slaves {
			one, cancel := context.WithTimeout(ctx, perConfirm)
			clean, garbled := confirm(one, client, id, o.Area, o.Address)
			cancel()
			if ctx.Err() != nil {
				client.Close()
				return stopped(u, id)
			}
			frag.Clean += clean
			frag.Garbled += garbled
		}
		client.Close()
		if len(frag.Slaves) > 0 || frag.Garbled > 0 {
			answered = append(answered, frag) // garbled replies say something was there
		}
		if frag.Garbled > 0 {
			fmt.Fprintf(o.Log, "  %d garbled replies (%d clean) at %s: a device may be there at another baud rate or parity\n", frag.Garbled, frag.Clean, ep.LineSettings())
		}
	}
	if found == 0 && late > 0 {
		return ErrOnlyLate
	}
	if found == 0 {
		return ErrNoDevice
	}
	bus := Best(answered)
	if o.Identify {
		ep, _ := modbus.ParseURL(bus.URL)
		client, err := modbus.Open(bus.URL, modbus.Options{Timeout: identifyTimeout(ep)})
		if err != nil {
			return err
		}
		for _, id := range bus.Slaves {
			one, cancel := context.WithTimeout(ctx, perDevice)
			who, err := sensors.Identify(one, client, id, o.Profiles)
			cancel()
			if ctx.Err() != nil {
				client.Close()
				return stopped(bus.URL, id)
			}
			if err != nil {
				fmt.Fprintf(o.Log, "slave %d at %s: %v\n", id, bus.URL, err)
			}
			bus.IDs = append(bus.IDs, who)
		}
		client.Close()
		WriteFragment(o.Out, []Bus{bus})
	}
	return nil
}

// sayLate tells log of each slave that answered after timeout, once, with
// the -timeout that would have caught its reply, and returns how many
// slaves it named.
func sayLate(log io.Writer, late []sensors.Late, timeout time.Duration) int {
	seen := map[byte]bool{}
	for _, l := range late {
		if seen[l.Slave] {
			continue
		}
		seen[l.Slave] = true
		after := "after -timeout " + timeout.String()
		if l.After > 0 {
			after = "after " + l.After.Round(time.Millisecond).String()
		}
		fmt.Fprintf(log, "  # slave %d answered late (%s): give -timeout %v\n", l.Slave, after, SuggestTimeout(l, timeout))
	}
	return len(seen)
}

// SuggestTimeout is the -timeout to give for a slave that answered late:
// twice the time its reply took, or three times timeout when that is
// unknown, rounded up to 100 ms, for the device's time varies.
func SuggestTimeout(l sensors.Late, timeout time.Duration) time.Duration {
	d := 3 * timeout
	if l.After > 0 {
		d = max(2*l.After, timeout+answerTime)
	}
	const step = 100 * time.Millisecond
	return (d + step - 1).Truncate(step)
}

// ConfirmReads is how many more reads a device found is sent at each line
// setting: one probe each says little of how clean a setting's replies
// are, and a slave that answers at two bauds is at the cleaner one.
const ConfirmReads = 3

// confirm reads slave's probe register ConfirmReads times and counts the
// replies that came back clean (the register or an exception) and garbled.
func confirm(ctx context.Context, c sensors.Reader, slave byte, area profile.Area, address uint16) (clean, garbled int) {
	for range ConfirmReads {
		_, err := c.Read(ctx, slave, area.FunctionCode(), address, 1)
		if ctx.Err() != nil {
			return clean, garbled
		}
		var mbErr *gm.ModbusError
		switch {
		case err == nil, errors.As(err, &mbErr):
			clean++
		case errors.Is(err, modbus.ErrLateReply):
			// Another slave's reply, well-formed: neither.
		case errors.Is(err, modbus.ErrCRC), errors.Is(err, modbus.ErrUnexpectedReply), errors.Is(err, modbus.ErrShortFrame):
			garbled++
		}
	}
	return clean, garbled
}

// Best is the bus of a port that answered at each of setting: the
// setting whose replies were cleanest (the smallest share garbled, then
// the most clean replies, then the first tried). The others are kept in
// its Others for the fragment to say: a port is one bus at one baud, and
// devices that answer only at different settings cannot share it.
func Best(settings []Bus) Bus {
	best := 0
	for i, b := range settings[1:] {
		if cleaner(b, settings[best]) {
			best = i + 1
		}
	}
	bus := settings[best]
	bus.Others = nil
	for i, b := range settings {
		if i != best {
			bus.Others = append(bus.Others, b)
		}
	}
	return bus
}

// cleaner says whether a's replies were cleaner than b's: a smaller share
// garbled (compared as a.G/(a.G+a.C) < b.G/(b.G+b.C)), then more clean.
func cleaner(a, b Bus) bool {
	if (len(a.Slaves) == 0) != (len(b.Slaves) == 0) {
		return len(b.Slaves) == 0 // a setting nothing answered cleanly at is no bus
	}
	l := a.Garbled * (b.Garbled + b.Clean)
	r := b.Garbled * (a.Garbled + a.Clean)
	if l != r {
		return l < r
	}
	return a.Clean > b.Clean
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
	URL     string
	Setting string // the line settings, as "9600 8N1"
	Slaves  []byte
	IDs     []sensors.Identity // by slave, when identified
	// Clean and Garbled count the replies at this setting, the sweep's
	// and the confirming reads'.
	Clean, Garbled int
	// Others are the port's other settings at which devices answered.
	Others []Bus
}

// WriteFragment writes the site file's buses for what a scan found, one
// per port, so that gateway check takes it as it is: each slave with the
// profile it matched best and how sure, the other candidates in a
// comment, device names unique over the fragment. Slaves that match no
// profile are comments, and so are a port's other line settings at which
// devices answered.
func WriteFragment(w io.Writer, frags []Bus) {
	fmt.Fprintf(w, "\n# A site-file fragment for what answered: check the profiles, rename the devices, then gateway check.\nbuses:\n")
	names := map[string]bool{}
	for i, f := range frags {
		fmt.Fprintf(w, "  - name: bus-%d\n    url: %q\n", i+1, f.URL)
		writeOthers(w, f)
		fmt.Fprintf(w, "    devices:\n")
		listed := 0
		for k, slave := range f.Slaves {
			var who sensors.Identity // none: the slave is a comment
			if k < len(f.IDs) {
				who = f.IDs[k]
			}
			if who.ID != nil {
				fmt.Fprintf(w, "      # slave %d identifies itself: vendor %q, product %q, model %q, revision %q\n",
					slave, who.ID.Vendor(), who.ID.Product(), who.ID.Model(), who.ID[modbus.ObjectMajorMinorRevision])
			}
			if len(who.Matches) == 0 {
				fmt.Fprintf(w, "      # slave %d: no profile's registers answer; write a profile for it (gateway read helps)\n", slave)
				continue
			}
			m := who.Matches[0]
			name := fmt.Sprintf("%s-%d", m.Profile.Name, slave)
			for n := 2; names[name]; n++ {
				name = fmt.Sprintf("%s-%d-%d", m.Profile.Name, slave, n)
			}
			names[name] = true
			fmt.Fprintf(w, "      - {name: %s, profile: %s, slave: %d}   # %s: %s\n", name, m.Profile.Name, slave, m.Confidence, m.Why)
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

// writeOthers comments f's other line settings: the same slaves there is
// a line whose devices also answer at another baud; different ones is a
// line that cannot work as it is, its devices set to different bauds.
func writeOthers(w io.Writer, f Bus) {
	if len(f.Others) == 0 {
		return
	}
	fmt.Fprintf(w, "    # at %s: %d clean replies, %d garbled; the cleanest of the port's line settings\n", f.Setting, f.Clean, f.Garbled)
	split := false
	for _, o := range f.Others {
		fmt.Fprintf(w, "    # at %s: slaves %s answered, %d clean replies, %d garbled\n", o.Setting, slaveList(o.Slaves), o.Clean, o.Garbled)
		split = split || len(o.Slaves) > 0 && !slices.Equal(o.Slaves, f.Slaves)
	}
	if split {
		fmt.Fprintf(w, "    # devices answered at different line settings on this one port: a line that cannot work until they are set to one baud and parity\n")
	}
}

func slaveList(ids []byte) string {
	if len(ids) == 0 {
		return "none"
	}
	s := make([]string, len(ids))
	for i, id := range ids {
		s[i] = strconv.Itoa(int(id))
	}
	return strings.Join(s, ", ")
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
