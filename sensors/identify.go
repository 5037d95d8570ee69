package sensors

import (
	"context"
	"errors"
	"fmt"
	"sort"
	"strings"
	"unicode"

	"fieldlink/internal/words"
	"fieldlink/sensors/modbus"
	"fieldlink/sensors/plan"
	"fieldlink/sensors/profile"
)

// Confidence is how sure [Identify] is of a profile.
type Confidence uint8

// Confidences, least sure first.
const (
	// Guess: the profile's registers answer, and so do another
	// profile's, or the device named another.
	Guess Confidence = iota + 1
	// Possible: the profile's registers all answer, and no other
	// profile's all do; the device did not say what it is.
	Possible
	// Likely: the device named the profile's model (Read Device
	// Identification), but not its vendor, or its registers did not all
	// answer.
	Likely
	// Sure: the device named the profile's vendor and model, and every
	// register of the profile answers.
	Sure
)

func (c Confidence) String() string {
	return [...]string{"none", "guess", "possible", "likely", "sure"}[c]
}

// Match is a profile a device may run, and how sure.
type Match struct {
	Profile    *profile.Profile
	Confidence Confidence
	// Why says what the confidence rests on.
	Why string
	// Registers is how many of the profile's registers answered.
	Registers int
}

// Identity is what Identify learnt of a slave.
type Identity struct {
	// ID is the device's answer to Read Device Identification; nil when
	// it does not implement it.
	ID modbus.DeviceID
	// Matches are the profiles whose registers answer or whose model the
	// device named, best first.
	Matches []Match
}

// Identifier is the part of a Modbus client Identify uses.
type Identifier interface {
	Reader
	ReadDeviceID(ctx context.Context, slave byte) (modbus.DeviceID, error)
}

// Identify asks slave what it is (function 43/14, where the device
// answers it) and reads the registers of every Modbus profile of set, to
// rank the profiles it may run. A profile none of whose registers answer
// is left out.
func Identify(ctx context.Context, c Identifier, slave byte, set profile.Set) (Identity, error) {
	var id Identity
	if d, err := c.ReadDeviceID(ctx, slave); err == nil {
		id.ID = d
	} else if ctx.Err() != nil {
		return id, ctx.Err()
	}
	for _, name := range set.Names() {
		p := set[name]
		if p.IsLine() || len(p.Registers) == 0 {
			continue
		}
		n, err := readable(ctx, c, slave, p)
		if ctx.Err() != nil {
			return id, ctx.Err()
		}
		if err != nil {
			return id, err
		}
		m := Match{Profile: p, Registers: n}
		vendor, model := id.ID != nil && sameVendor(id.ID.Vendor(), p.Manufacturer), id.ID != nil && sameModel(id.ID, p.Model)
		all := n == len(p.Registers)
		switch {
		case model && vendor && all:
			m.Confidence, m.Why = Sure, fmt.Sprintf("the device names its vendor %q and model %q, and all %d registers answer", id.ID.Vendor(), productOf(id.ID), n)
		case model:
			m.Confidence, m.Why = Likely, fmt.Sprintf("the device names model %q; %d of %d registers answer", productOf(id.ID), n, len(p.Registers))
		case all:
			m.Confidence, m.Why = Possible, fmt.Sprintf("all %d registers answer", n)
		default:
			continue
		}
		id.Matches = append(id.Matches, m)
	}
	sort.SliceStable(id.Matches, func(i, j int) bool {
		a, b := id.Matches[i], id.Matches[j]
		if a.Confidence != b.Confidence {
			return a.Confidence > b.Confidence
		}
		return a.Registers > b.Registers
	})
	// A profile known only by its registers is possible when it is the
	// only one whose registers all answer and the device named none: many
	// devices answer addresses past their own map, so several profiles
	// that all read are guesses.
	named := len(id.Matches) > 0 && id.Matches[0].Confidence >= Likely
	reading := 0
	for _, m := range id.Matches {
		if m.Confidence == Possible {
			reading++
		}
	}
	for i, m := range id.Matches {
		if m.Confidence == Possible && (named || reading > 1) {
			id.Matches[i].Confidence = Guess
			if !named {
				id.Matches[i].Why += fmt.Sprintf(", as do those of %s", words.Count(reading-1, "other profile"))
			}
		}
	}
	return id, nil
}

// productOf is the product code the device gave, else its model name.
func productOf(d modbus.DeviceID) string {
	if p := d.Product(); p != "" {
		return p
	}
	return d.Model()
}

// readable counts p's registers that slave answers, by p's own request
// plan; an exception or a silence counts as not answering, a broken link
// is an error.
func readable(ctx context.Context, c Identifier, slave byte, p *profile.Profile) (int, error) {
	reqs, err := PlanDevice(p, -1, plan.Cost{})
	if err != nil {
		return 0, err
	}
	n := 0
	for _, r := range reqs {
		_, err := c.Read(ctx, slave, r.Area.FunctionCode(), r.Start, r.Count)
		if err == nil {
			n += len(r.Refs)
			continue
		}
		if errors.Is(err, modbus.ErrClosed) {
			return 0, err
		}
	}
	return n, nil
}

// fields splits s into lower-case runs of letters and digits.
func fields(s string) []string {
	return strings.FieldsFunc(strings.ToLower(s), func(r rune) bool { return !unicode.IsLetter(r) && !unicode.IsDigit(r) })
}

// squash is s in lower case without anything but letters and digits.
func squash(s string) string { return strings.Join(fields(s), "") }

// sameVendor reports whether a device's vendor name and a profile's
// manufacturer share a word of four letters or more.
func sameVendor(vendor, manufacturer string) bool {
	for _, a := range fields(vendor) {
		for _, b := range fields(manufacturer) {
			if len(a) >= 4 && a == b {
				return true
			}
		}
	}
	return false
}

// sameModel reports whether the product code or model name a device gave
// is the profile's model: its text up to the first parenthesis, compared
// without case, spaces or dashes.
func sameModel(d modbus.DeviceID, model string) bool {
	head, _, _ := strings.Cut(model, " (")
	want := squash(head)
	if len(want) < 4 {
		return false
	}
	for _, got := range []string{d.Product(), d[modbus.ObjectModelName], d[modbus.ObjectProductName]} {
		if g := squash(got); len(g) >= 4 && (g == want || strings.HasPrefix(g, want) || strings.HasPrefix(want, g)) {
			return true
		}
	}
	return false
}
