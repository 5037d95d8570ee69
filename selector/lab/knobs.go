package lab

import (
	"fmt"
	"strconv"
	"strings"
	"time"

	"fieldlink/selector"
)

// A knob is one tunable constant of drf_cswlc, as the lab names it in a
// strategy "drf_cswlc:name=value,…" and the tuner searches it.
type knob struct {
	name     string
	lo, hi   float64 // the tuner's search range
	log      bool    // searched on a log scale
	set      func(o *selector.DRFCSWLCOptions, v float64)
	get      func(o *selector.DRFCSWLCOptions) float64
	duration bool // v is in milliseconds
	// fixed: set by a target of its own, not by the tuner's p99 score
	// (warm-up by the cold join's first use; stall detection by the black
	// hole's faulty share): the tuner leaves it at its default.
	fixed bool
}

func msOf(d time.Duration) float64  { return float64(d) / float64(time.Millisecond) }
func msDur(v float64) time.Duration { return time.Duration(v * float64(time.Millisecond)) }

// knobs are drf_cswlc's tunable constants.
var knobs = []knob{
	{name: "latency", lo: 0.25, hi: 3, set: func(o *selector.DRFCSWLCOptions, v float64) { o.Latency = v }, get: func(o *selector.DRFCSWLCOptions) float64 { return o.Latency }},
	{name: "reported", lo: 0.02, hi: 2, log: true, set: func(o *selector.DRFCSWLCOptions, v float64) { o.Reported = v }, get: func(o *selector.DRFCSWLCOptions) float64 { return o.Reported }},
	{name: "decay", lo: 300, hi: 20000, log: true, duration: true, set: func(o *selector.DRFCSWLCOptions, v float64) { o.Decay = msDur(v) }, get: func(o *selector.DRFCSWLCOptions) float64 { return msOf(o.Decay) }},
	{name: "fall", lo: 0.1, hi: 1, set: func(o *selector.DRFCSWLCOptions, v float64) { o.Fall = v }, get: func(o *selector.DRFCSWLCOptions) float64 { return o.Fall }},
	{name: "eject", lo: 200, hi: 5000, log: true, duration: true, set: func(o *selector.DRFCSWLCOptions, v float64) { o.Eject = msDur(v) }, get: func(o *selector.DRFCSWLCOptions) float64 { return msOf(o.Eject) }},
	{name: "warmup", fixed: true, lo: 500, hi: 10000, log: true, duration: true, set: func(o *selector.DRFCSWLCOptions, v float64) { o.WarmUp = msDur(v) }, get: func(o *selector.DRFCSWLCOptions) float64 { return msOf(o.WarmUp) }},
	{name: "spread", fixed: true, lo: 0.1, hi: 1, set: func(o *selector.DRFCSWLCOptions, v float64) { o.Spread = v }, get: func(o *selector.DRFCSWLCOptions) float64 { return o.Spread }},
	{name: "aggression", fixed: true, lo: 1, hi: 4, set: func(o *selector.DRFCSWLCOptions, v float64) { o.Aggression = v }, get: func(o *selector.DRFCSWLCOptions) float64 { return o.Aggression }},
	{name: "stall", fixed: true, lo: 2, hi: 20, set: func(o *selector.DRFCSWLCOptions, v float64) { o.Stall = v }, get: func(o *selector.DRFCSWLCOptions) float64 { return o.Stall }},
	{name: "minstall", fixed: true, lo: 100, hi: 2000, log: true, duration: true, set: func(o *selector.DRFCSWLCOptions, v float64) { o.MinStall = msDur(v) }, get: func(o *selector.DRFCSWLCOptions) float64 { return msOf(o.MinStall) }},
	{name: "interval", lo: 50, hi: 1000, log: true, duration: true, set: func(o *selector.DRFCSWLCOptions, v float64) { o.Interval = msDur(v) }, get: func(o *selector.DRFCSWLCOptions) float64 { return msOf(o.Interval) }},
}

// parseKnobs reads "name=value;…" (durations in milliseconds) into options.
func parseKnobs(s string) (selector.DRFCSWLCOptions, error) {
	var o selector.DRFCSWLCOptions
	for kv := range strings.SplitSeq(s, ";") {
		if kv == "" {
			continue
		}
		k, v, ok := strings.Cut(kv, "=")
		f, err := strconv.ParseFloat(v, 64)
		if !ok || err != nil {
			return o, fmt.Errorf("lab: drf_cswlc knob %q: want name=number", kv)
		}
		found := false
		for _, kn := range knobs {
			if kn.name == k {
				kn.set(&o, f)
				found = true
			}
		}
		if !found {
			return o, fmt.Errorf("lab: drf_cswlc has no knob %q", k)
		}
	}
	return o, nil
}

// knobString is the strategy name that gives options o.
func knobString(o selector.DRFCSWLCOptions) string {
	o = o.WithDefaults()
	parts := make([]string, len(knobs))
	for i, kn := range knobs {
		parts[i] = kn.name + "=" + strconv.FormatFloat(kn.get(&o), 'g', -1, 64)
	}
	return "drf_cswlc:" + strings.Join(parts, ";")
}
