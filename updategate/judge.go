package updategate

import (
	"encoding/json"
	"errors"
	"fmt"
	"io/fs"
	"math"
	"os"
	"strings"
	"time"

	"fieldlink/internal/atomicfile"
	"fieldlink/internal/words"
)

// Baseline is what held just before an update, recorded from the daemon
// that is about to be replaced.
type Baseline struct {
	At time.Time `json:"at"`
	// Version is the gateway that recorded it.
	Version string `json:"version"`
	// Running is true when a daemon answered on its metrics listener;
	// Error says why not.
	Running bool   `json:"running"`
	Error   string `json:"error,omitempty"`
	// Reachable is true when an upstream was up: the new version must then
	// deliver.
	Reachable   bool     `json:"upstream_reachable"`
	UpstreamsUp []string `json:"upstreams_up,omitempty"`
	// Started is the start of the daemon that answered. The same process
	// reports the same start at every scrape; another one, a later start.
	Started time.Time `json:"started,omitzero"`
	// Devices were configured, Answering of them answered their latest
	// poll.
	Devices   int `json:"devices"`
	Answering int `json:"answering"`
}

// NewBaseline records s, a scrape of the running daemon, at time at; a
// nil s with err records that no daemon answered.
func NewBaseline(s *Sample, err error, at time.Time, version string) Baseline {
	b := Baseline{At: at, Version: version}
	if s == nil {
		if err != nil {
			b.Error = err.Error()
		}
		return b
	}
	b.Running = true
	b.Started = s.Start
	b.UpstreamsUp = s.Reachable()
	b.Reachable = len(b.UpstreamsUp) > 0
	b.Devices = len(s.Devices)
	for _, d := range s.Devices {
		if d.Health == "ok" {
			b.Answering++
		}
	}
	return b
}

// String says what the baseline holds, for a log line.
func (b Baseline) String() string {
	if !b.Running {
		return fmt.Sprintf("no daemon answered at %s (%s)", b.At.Format(time.RFC3339), b.Error)
	}
	net := "no upstream reachable"
	if b.Reachable {
		net = "upstream reachable: " + strings.Join(b.UpstreamsUp, ", ")
	}
	return fmt.Sprintf("at %s: %d of %d devices answering, %s", b.At.Format(time.RFC3339), b.Answering, b.Devices, net)
}

// WriteBaseline writes b to path atomically: a crash leaves the old file or
// the new one.
func WriteBaseline(path string, b Baseline) error {
	data, err := json.MarshalIndent(b, "", "  ")
	if err != nil {
		return err
	}
	if err := atomicfile.Write(path, append(data, '\n'), 0o644); err != nil {
		return fmt.Errorf("health: baseline %s: %w", path, err)
	}
	return nil
}

// ReadBaseline reads the baseline at path; nil without error when there is
// none.
func ReadBaseline(path string) (*Baseline, error) {
	data, err := os.ReadFile(path)
	if errors.Is(err, fs.ErrNotExist) {
		return nil, nil
	}
	if err != nil {
		return nil, fmt.Errorf("health: baseline %s: %w", path, err)
	}
	var b Baseline
	if err := json.Unmarshal(data, &b); err != nil {
		return nil, fmt.Errorf("health: baseline %s: %w", path, err)
	}
	return &b, nil
}

// startSlack is how far a process's start time, as /metrics reports it,
// may fall before the true one: the kernel's boot time is whole seconds,
// and a process start is counted in clock ticks.
const startSlack = 2 * time.Second

// Criteria are what a daemon that passes the gate has done since it
// started.
type Criteria struct {
	// Cycles is how many successful polls the busiest device must have
	// made, and how many records the buffer must have stored: the daemon
	// has run that many rounds of its schedule. Default 3.
	Cycles int
	// MaxDrop is the largest fall, from the baseline, in the share of
	// devices that answered (0.10: ten points). A device answers once it
	// had one successful poll since the daemon started.
	MaxDrop float64
}

// DefaultCriteria are gateway health's defaults.
var DefaultCriteria = Criteria{Cycles: 3, MaxDrop: 0.10}

// Judge gives the gate's verdict on s: whether the daemon passes, given the
// baseline recorded before the update (nil: none). It returns "" and a summary when it does,
// or the first thing missing. A verdict against can turn into one for on a
// later sample, as the daemon makes progress: the caller scrapes until a
// deadline.
func Judge(s Sample, base *Baseline, c Criteria) (why, summary string) {
	if c.Cycles <= 0 {
		c.Cycles = DefaultCriteria.Cycles
	}
	if base != nil && !s.Start.IsZero() && (s.Start.Equal(base.Started) || s.Start.Before(base.At.Add(-startSlack))) {
		return fmt.Sprintf("the daemon answering started at %s, before the update began (%s): the new version is not running",
			s.Start.UTC().Format(time.RFC3339), base.At.UTC().Format(time.RFC3339)), ""
	}
	n := len(s.Devices)
	if n == 0 {
		return "the daemon reports no devices", ""
	}
	var answering, busiest uint64
	var silent []string
	for _, d := range s.Devices {
		a := d.Answered()
		busiest = max(busiest, a)
		if a > 0 {
			answering++
		} else {
			silent = append(silent, fmt.Sprintf("%s/%s (%s failed)", d.Bus, d.Name, words.Count(d.Errors, "poll")))
		}
	}
	need := required(base, n, c.MaxDrop)
	if need == 0 {
		// Nothing answered before the update either: the daemon must at
		// least run its schedule.
		var polls uint64
		for _, d := range s.Devices {
			polls += d.Polls
		}
		if polls < uint64(c.Cycles) {
			return fmt.Sprintf("%s since the daemon started, %d needed (no device answered before the update)", words.Count(polls, "poll"), c.Cycles), ""
		}
	}
	if int(answering) < need {
		why := fmt.Sprintf("%d of %d devices answered since the daemon started, %d needed", answering, n, need)
		if base != nil && base.Running {
			why += fmt.Sprintf(" (%d of %d answered before the update)", base.Answering, base.Devices)
		}
		return why + "; not answering: " + list(silent), ""
	}
	if need > 0 && busiest < uint64(c.Cycles) {
		return fmt.Sprintf("%s of the busiest device, %d cycles needed", words.Count(busiest, "successful poll"), c.Cycles), ""
	}
	if s.Buffered && need > 0 && s.Appends < uint64(c.Cycles) {
		return fmt.Sprintf("%s in the buffer since the daemon started, %d needed", words.Count(s.Appends, "record")+" stored", c.Cycles), ""
	}
	delivered := s.Delivered()
	wantDelivery := base != nil && base.Reachable
	if wantDelivery && delivered == 0 {
		up := "none up"
		if r := s.Reachable(); len(r) > 0 {
			up = strings.Join(r, ", ") + " up"
		}
		return fmt.Sprintf("nothing delivered since the daemon started (upstreams: %s), though %s was reachable before the update",
			up, strings.Join(base.UpstreamsUp, ", ")), ""
	}
	summary = fmt.Sprintf("%d of %s answering, busiest %s", answering, words.Count(n, "device"), words.Count(busiest, "poll"))
	if s.Buffered {
		summary += fmt.Sprintf(", %d records stored, %d queued", s.Appends, s.Queued)
	}
	switch {
	case wantDelivery:
		summary += fmt.Sprintf(", %d delivered", delivered)
	case base != nil && base.Running:
		summary += fmt.Sprintf(", %d delivered (no upstream was reachable before the update: not required)", delivered)
	default:
		summary += fmt.Sprintf(", %d delivered (no baseline: not required)", delivered)
	}
	return "", summary
}

// required returns how many of n devices must answer: none when none
// answered before the update, one without a baseline (polling needs no
// network: a new version must poll something), else the share that
// answered before, less maxDrop, and at least one.
func required(base *Baseline, n int, maxDrop float64) int {
	if base == nil || !base.Running || base.Devices == 0 {
		return 1
	}
	if base.Answering == 0 {
		return 0
	}
	share := float64(base.Answering)/float64(base.Devices) - maxDrop
	return max(1, int(math.Ceil(share*float64(n)-1e-9)))
}

// list joins up to five items, saying how many more there are.
func list(items []string) string {
	if len(items) > 5 {
		return strings.Join(items[:5], ", ") + fmt.Sprintf(" and %d more", len(items)-5)
	}
	return strings.Join(items, ", ")
}
