package status

import (
	"time"

	"fieldlink/buffer/cardstore"
	"fieldlink/uplink"
)

// Buffer is the store-and-forward queue.
type Buffer struct {
	Waiting          int      `json:"waiting"`
	Alarms           int      `json:"alarms"`
	Leased           int      `json:"leased"`
	OldestAgeSeconds *float64 `json:"oldest_age_s"`
	Bytes            int64    `json:"bytes"`
	MaxBytes         int64    `json:"max_bytes"`
	FileSize         int64    `json:"file_size"`
	Evicted          uint64   `json:"evicted"`
	Rejected         uint64   `json:"rejected"`
	DeadLetters      uint64   `json:"dead_letters"`
	// DiskFree and DiskTotal are of the file system holding the buffer;
	// null when unknown.
	DiskFree    *uint64    `json:"disk_free"`
	DiskTotal   *uint64    `json:"disk_total"`
	LastError   *string    `json:"last_error"`
	LastErrorAt *time.Time `json:"last_error_at"`
	// Durable: packets are stored on the card before they count as taken.
	// Durability is ok, slow, io_error, read_only or full, Problem says it
	// in words (null when ok) and Since when it began; Volatile counts the
	// packets waiting in memory meanwhile (see cardstore.State).
	Durable           bool       `json:"durable"`
	Durability        string     `json:"durability"`
	DurabilityProblem *string    `json:"durability_problem"`
	DurabilitySince   *time.Time `json:"durability_since"`
	Volatile          int        `json:"volatile"`
}

// Uplink is the delivery side.
type Uplink struct {
	Selector     string `json:"selector"`
	Delivered    uint64 `json:"delivered"`
	Retried      uint64 `json:"retried"`
	Released     uint64 `json:"released"`
	DeadLettered uint64 `json:"dead_lettered"`
	// ShareWindowSeconds is the window of each upstream's Share.
	ShareWindowSeconds float64    `json:"share_window_s"`
	Upstreams          []Upstream `json:"upstreams"`
	lastDelivered      time.Time
}

// FailingAfter is how many deliveries in a row must fail for an upstream
// that is up (connected, or its ping answers) to show as failing: one that
// answers its ping and refuses every write (a database that does not
// exist, a wrong token) is not up to the technician, and must not hide
// from the page's errors-only view. Fewer are a blip.
const FailingAfter = 3

// Upstream is one MQTT broker or HTTP endpoint, by its credential-free
// name.
type Upstream struct {
	Name string `json:"name"`
	// State is up, failing (up, but its last FailingAfter deliveries or
	// more failed), down or retired.
	State string `json:"state"`
	// Share is the upstream's part of the records delivered over the
	// window (0 to 1); null when nothing was delivered in it.
	Share     *float64 `json:"share"`
	Delivered uint64   `json:"delivered"`
	InFlight  int      `json:"in_flight"`
	// LatencySeconds is the mean delivery latency over the latest
	// deliveries; null before the first.
	LatencySeconds      *float64   `json:"latency_s"`
	ConsecutiveFailures uint64     `json:"failures_in_row"`
	Failures            uint64     `json:"failures"`
	Timeouts            uint64     `json:"timeouts"`
	LastFailure         *time.Time `json:"last_failure"`
	// LastFailureTimeout says the last failure was a timeout.
	LastFailureTimeout bool     `json:"last_failure_timeout"`
	ProbeRTTSeconds    *float64 `json:"probe_rtt_s"`
	// LastError is the latest failed connection, probe or delivery, in
	// words, and LastErrorAt when; null when none since the start.
	LastError   *string    `json:"last_error"`
	LastErrorAt *time.Time `json:"last_error_at"`
	// DownSince is when a down upstream went down, or a failing one's
	// deliveries began to fail (the first failure since the last
	// success); null otherwise.
	DownSince *time.Time `json:"down_since"`
}

// Downlink is the state of the downlink.
type Downlink struct {
	Enabled bool `json:"enabled"`
	// Unsigned: commands run without a signature, so anyone who can
	// publish on the broker can write to the devices.
	Unsigned bool      `json:"unsigned"`
	Commands []Command `json:"commands"`
}

// Command is one downlink command.
type Command struct {
	At      time.Time `json:"at"`
	Device  string    `json:"device"`
	Command string    `json:"command"`
	OK      bool      `json:"ok"`
	Result  string    `json:"result"`
}

func (s *Server) buffer(now time.Time) *Buffer {
	if s.src.Buffer == nil {
		return nil
	}
	st, ok := s.src.Buffer()
	if !ok {
		return nil
	}
	b := &Buffer{
		Waiting: st.Alarms + st.Normal, Alarms: st.Alarms, Leased: st.Leased,
		Bytes: st.Bytes, MaxBytes: st.MaxBytes, FileSize: st.FileSize,
		Evicted: st.EvictedMaxBytes + st.EvictedMaxAge, Rejected: st.RejectedFull, DeadLetters: st.DeadLetters,
		LastError: text(st.LastError), LastErrorAt: timePtr(st.LastErrorAt),
		Durable: true, Durability: "ok",
	}
	if s.src.Durability != nil {
		d := s.src.Durability()
		b.Durable, b.Durability, b.DurabilityProblem, b.Volatile = d.Durable, string(d.Fault), text(d.Words), d.Volatile
		if d.Fault != cardstore.OK {
			b.DurabilitySince = timePtr(d.Since)
		}
	}
	// The oldest record may be one acknowledged whose deletion waits for
	// the next commit: not counted as waiting, so not aged either.
	if b.Waiting > 0 && st.OldestSeq != 0 && !st.OldestAt.IsZero() {
		b.OldestAgeSeconds = ptr(max(seconds(now.Sub(st.OldestAt)), 0))
	}
	if s.src.Disk != nil {
		if d, ok := s.src.Disk(); ok {
			b.DiskFree, b.DiskTotal = &d.Free, &d.Total
		}
	}
	return b
}

func (s *Server) uplink(past *sample, now time.Time) *Uplink {
	if s.src.Delivery == nil {
		return nil
	}
	del, ok := s.src.Delivery()
	if !ok {
		return nil
	}
	u := &Uplink{Delivered: del.Delivered, Retried: del.Retried, Released: del.Released, DeadLettered: del.DeadLettered, Upstreams: []Upstream{}}
	if s.src.Selector != nil {
		u.Selector = s.src.Selector()
	}
	u.lastDelivered = del.LastDelivered
	delivered := map[string]uint64{}
	lastErr := map[string]uplink.UpstreamCounters{}
	counters := map[string]uplink.UpstreamCounters{}
	for _, c := range del.Upstreams {
		delivered[c.Name] += c.Delivered
		counters[c.Name] = c
		if c.LastError != "" {
			lastErr[c.Name] = c
		}
	}
	// Each upstream's share of the records delivered over the window, or
	// since the start when there is no window yet (or a reload restarted
	// the counts).
	base := past.delivered
	for name, n := range delivered {
		if base[name] > n {
			base = nil
		}
	}
	if base != nil && past.at.Before(now) {
		u.ShareWindowSeconds = seconds(now.Sub(past.at))
	}
	var total uint64
	for name, n := range delivered {
		total += n - base[name]
	}
	if s.src.Upstreams != nil {
		for _, st := range s.src.Upstreams() {
			up := Upstream{
				Name: st.Name, State: "down", Delivered: delivered[st.Name], InFlight: st.InFlight,
				ConsecutiveFailures: st.ConsecutiveFailures, Failures: st.Failures, Timeouts: st.Timeouts,
				LastFailure: timePtr(st.LastFailure),
			}
			switch {
			case st.Retired:
				up.State = "retired"
			case st.Up && st.ConsecutiveFailures >= FailingAfter:
				up.State = "failing"
			case st.Up:
				up.State = "up"
			}
			switch up.State {
			case "down":
				up.DownSince = timePtr(counters[st.Name].DownSince)
			case "failing":
				up.DownSince = timePtr(counters[st.Name].FailingSince)
			}
			if total > 0 {
				up.Share = ptr(float64(delivered[st.Name]-base[st.Name]) / float64(total))
			}
			if st.Samples > 0 {
				up.LatencySeconds = ptr(seconds(st.LatencyMean))
			}
			if !st.LastFailure.IsZero() && !st.LastTimeout.IsZero() && !st.LastTimeout.Before(st.LastFailure) {
				up.LastFailureTimeout = true
			}
			if st.ProbeRTT > 0 {
				up.ProbeRTTSeconds = ptr(seconds(st.ProbeRTT))
			}
			if c, ok := lastErr[st.Name]; ok {
				up.LastError, up.LastErrorAt = ptr(c.LastError), timePtr(c.LastErrorAt)
			}
			u.Upstreams = append(u.Upstreams, up)
		}
	}
	return u
}
