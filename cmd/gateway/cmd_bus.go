package main

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

func cmdRead(ctx context.Context, args []string, stdout, stderr io.Writer) error {
	fs := flags("read", stderr)
	rawURL := fs.String("url", "", "bus URL: rtu:///dev/ttyUSB0?baud=9600&parity=N, tcp://host:502, rtuovertcp://host:port")
	slave := fs.Int("slave", 1, "slave id (1-247)")
	areaName := fs.String("area", "holding", "holding, input, coil or discrete")
	address := fs.Int("address", 0, "first address, zero-based (register 40001 is address 0)")
	count := fs.Int("count", 1, "number of values to read")
	typeName := fs.String("type", "", "value type: int16 uint16 int32 uint32 int64 uint64 float32 float64 bool string (default uint16, bool for bits)")
	orderName := fs.String("order", "ABCD", "byte order of multi-register values: ABCD, CDAB, BADC, DCBA")
	length := fs.Int("length", 0, "registers per string (type string)")
	timeout := fs.Duration("timeout", time.Second, "reply timeout")
	if err := parse(fs, args); err != nil {
		return err
	}
	reg := profile.Register{Length: *length}
	var errs []string
	if err := reg.Area.UnmarshalText([]byte(*areaName)); err != nil {
		errs = append(errs, "-area: "+err.Error())
	}
	if *typeName == "" {
		*typeName = "uint16"
		if reg.Area.IsBit() {
			*typeName = "bool"
		}
	}
	if err := reg.Type.UnmarshalText([]byte(*typeName)); err != nil {
		errs = append(errs, "-type: "+err.Error())
	}
	if err := reg.Order.UnmarshalText([]byte(*orderName)); err != nil {
		errs = append(errs, "-order: "+err.Error())
	}
	if *slave < 0 || *slave > 247 {
		errs = append(errs, fmt.Sprintf("-slave: must be 0..247, got %d", *slave))
	}
	if *address < 0 || *address > 65535 {
		errs = append(errs, fmt.Sprintf("-address: must be 0..65535, got %d", *address))
	}
	if reg.Type == profile.String && *length < 1 {
		errs = append(errs, "-length: give the registers per string")
	}
	if reg.Area.IsBit() && reg.Type != profile.Bool {
		errs = append(errs, "-type: coils and discrete inputs are bool")
	}
	words := max(reg.Words(), 1)
	limit := modbus.MaxReadRegisters
	if reg.Area.IsBit() {
		limit = modbus.MaxReadBits
	}
	if *count < 1 || *count*words > limit {
		errs = append(errs, fmt.Sprintf("-count: %d values of %d words do not fit one request (max %d)", *count, words, limit))
	}
	if *rawURL == "" {
		errs = append(errs, "-url: give the bus URL")
	}
	if len(errs) > 0 {
		return errors.New(strings.Join(errs, "; "))
	}
	client, err := modbus.Open(*rawURL, modbus.Options{Timeout: *timeout})
	if err != nil {
		return err
	}
	defer client.Close()
	qty := *count * words
	data, err := client.Read(ctx, byte(*slave), reg.Area.FunctionCode(), uint16(*address), uint16(qty))
	if err != nil {
		return err
	}
	for i := range *count {
		addr := *address + i*words
		if reg.Area.IsBit() {
			fmt.Fprintf(stdout, "[%d]: %v\n", addr, data[i/8]&(1<<(i%8)) != 0)
			continue
		}
		reg.Address = uint16(addr)
		v := reg.Decode(data[2*i*words : 2*(i+1)*words])
		fmt.Fprintf(stdout, "[%d]: %s\n", addr, v)
	}
	return nil
}

func cmdScan(ctx context.Context, args []string, stdout, stderr io.Writer) error {
	fs := flags("scan", stderr)
	rawURL := fs.String("url", "", "bus URL (the baud in it is replaced by each of -bauds on a serial line)")
	slaves := fs.String("slaves", "1-247", "slave ids to try: ranges and lists, e.g. 1-10,32")
	bauds := fs.String("bauds", "9600,4800,19200,2400,38400,115200", "baud rates to try on a serial line")
	timeout := fs.Duration("timeout", 100*time.Millisecond, "reply timeout per try")
	areaName := fs.String("area", "holding", "area to probe: holding or input")
	address := fs.Int("address", 0, "address to probe")
	profilesDir := fs.String("profiles", "", "a directory of extra *.yaml profiles to match the devices found against")
	identify := fs.Bool("identify", true, "ask each device found what it is (function 43/14) and match it and its registers against the profiles")
	if err := parse(fs, args); err != nil {
		return err
	}
	set, err := loadProfiles(*profilesDir)
	if err != nil {
		return fmt.Errorf("-profiles: %w", err)
	}
	ids, err := parseIDs(*slaves)
	if err != nil {
		return fmt.Errorf("-slaves: %v", err)
	}
	var area profile.Area
	if err := area.UnmarshalText([]byte(*areaName)); err != nil || area.IsBit() {
		return fmt.Errorf("-area: must be holding or input")
	}
	ep, err := modbus.ParseURL(*rawURL)
	if err != nil {
		return err
	}
	urls := []string{*rawURL}
	if ep.Scheme == "rtu" {
		urls = nil
		for _, b := range strings.Split(*bauds, ",") {
			if _, err := strconv.Atoi(strings.TrimSpace(b)); err != nil {
				return fmt.Errorf("-bauds: %q is not a number", b)
			}
			u, _ := url.Parse(*rawURL)
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
	perURL := time.Duration(len(ids)+1) * *timeout
	perDevice := time.Duration(identifyRequests(set)) * *timeout
	then := ""
	if *identify {
		then = fmt.Sprintf(", then up to %v for each device found, to identify it (%s; -identify=false skips it)",
			ceilSecond(perDevice), words.Count(identifyRequests(set), "request"))
	}
	fmt.Fprintf(stderr, "trying %s at %s: at most about %v to sweep (a silent id costs -timeout %v)%s; -slaves and -bauds narrow it, Ctrl-C stops\n",
		words.Count(len(ids), "slave id"), words.Count(len(urls), "line setting"), ceilSecond(time.Duration(len(urls))*perURL), *timeout, then)
	found := 0
	stopped := func(u string, id byte) error {
		fmt.Fprintf(stderr, "scan stopped at slave %d of %s: %s found so far\n", id, u, words.Count(found, "device"))
		return errSilent
	}
	var fragments []busFragment
	for _, u := range urls {
		frag := busFragment{url: u}
		client, err := modbus.Open(u, modbus.Options{Timeout: *timeout})
		if err != nil {
			return err
		}
		ep, _ := modbus.ParseURL(u)
		fmt.Fprintf(stderr, "scanning %s (%s), %d slave ids...\n", u, ep.LineSettings(), len(ids))
		sweep, cancel := context.WithTimeout(ctx, perURL)
		res, at, err := sensors.Scan(sweep, client, ids, area, uint16(*address), func(a sensors.Answer) {
			if a.Exception == nil {
				fmt.Fprintf(stdout, "found slave %d at %s (%s): answered a read of %s %d\n", a.Slave, u, ep.LineSettings(), area, *address)
			} else {
				fmt.Fprintf(stdout, "found slave %d at %s (%s): answered with exception %d (%v)\n", a.Slave, u, ep.LineSettings(), a.Exception.ExceptionCode, a.Err)
			}
			found++
			frag.slaves = append(frag.slaves, a.Slave)
		})
		cancel()
		if err != nil && ctx.Err() != nil {
			client.Close()
			return stopped(u, at)
		}
		if err != nil {
			fmt.Fprintf(stderr, "  the sweep of %s stopped at slave %d, at its bound of %v\n", u, at, perURL)
		}
		garbled := res.Garbled
		if *identify {
			for _, id := range frag.slaves {
				one, cancel := context.WithTimeout(ctx, perDevice)
				who, err := sensors.Identify(one, client, id, set)
				cancel()
				if ctx.Err() != nil {
					client.Close()
					return stopped(u, id)
				}
				if err != nil {
					fmt.Fprintf(stderr, "slave %d at %s: %v\n", id, u, err)
				}
				frag.ids = append(frag.ids, who)
			}
		}
		client.Close()
		if len(frag.slaves) > 0 {
			fragments = append(fragments, frag)
		}
		if garbled > 0 {
			fmt.Fprintf(stderr, "  %d garbled replies at %s: a device may be there at another baud rate or parity\n", garbled, ep.LineSettings())
		}
	}
	if found == 0 {
		return fmt.Errorf("no device answered")
	}
	if *identify {
		printFragment(stdout, fragments)
	}
	return nil
}

// identifyRequests is how many requests identifying one device may send:
// up to 8 for its identification (43/14), then one per request of every
// Modbus profile of set.
func identifyRequests(set profile.Set) int {
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

// busFragment is what scan found at one line setting.
type busFragment struct {
	url    string
	slaves []byte
	ids    []sensors.Identity // by slave, when identified
}

// printFragment writes the site file's buses for what scan found: each
// slave with the profile it matched best and how sure, the other
// candidates in a comment. Slaves that match no profile are comments.
func printFragment(w io.Writer, frags []busFragment) {
	fmt.Fprintf(w, "\n# A site-file fragment for what answered: check the profiles, rename the devices, then gateway check.\nbuses:\n")
	for i, f := range frags {
		fmt.Fprintf(w, "  - name: bus-%d\n    url: %q\n    devices:\n", i+1, f.url)
		listed := 0
		for k, slave := range f.slaves {
			who := f.ids[k]
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

// parseIDs parses "1-10,32" into slave ids.
func parseIDs(s string) ([]byte, error) {
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
