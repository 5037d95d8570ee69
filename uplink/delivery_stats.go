package uplink

import (
	"time"
)

// UpstreamCounters are one upstream's delivery counters.
type UpstreamCounters struct {
	Name      string
	Picked    uint64 // batches sent to it
	Delivered uint64 // records it acknowledged
	Failed    uint64 // batches that failed on it
	// LastError is the upstream's latest failure in words: a
	// delivery that failed, or a connection that failed or ended (its
	// sender's LastError, for MQTT and for HTTP's probes); "" if none
	// since it was added. LastErrorAt is when.
	LastError   string
	LastErrorAt time.Time
	// DownSince is when the upstream was last seen to go down (its
	// sender not up), zero while it is up; FailingSince is its first
	// failed delivery since the last one that succeeded, zero after a
	// success. The status page says since when.
	DownSince, FailingSince time.Time
}

// DeliveryStats are the loop's counters.
type DeliveryStats struct {
	Delivered, Retried, DeadLettered, Released uint64
	InFlight                                   int64
	// LastDelivered is when an upstream last acknowledged a batch; zero
	// before the first.
	LastDelivered time.Time
	Upstreams     []UpstreamCounters
}

// Stats returns the loop's counters.
func (d *Delivery) Stats() DeliveryStats {
	st := DeliveryStats{Delivered: d.delivered.Load(), Retried: d.retried.Load(), DeadLettered: d.dead.Load(),
		Released: d.released.Load(), InFlight: d.inflight.Load()}
	if ns := d.lastDelivered.Load(); ns != 0 {
		st.LastDelivered = time.Unix(0, ns)
	}
	d.mu.Lock()
	defer d.mu.Unlock()
	for _, s := range d.slots {
		if s != nil {
			u := UpstreamCounters{Name: s.sender.Name(), Picked: s.picked.Load(), Delivered: s.delivered.Load(), Failed: s.failed.Load()}
			u.LastError, u.LastErrorAt = s.lastErr.Get()
			u.DownSince, u.FailingSince = unixTime(s.downSince.Load()), unixTime(s.failSince.Load())
			if le, ok := s.sender.(lastErrorer); ok {
				text, at := le.LastError()
				u.LastError, u.LastErrorAt = newer(u.LastError, u.LastErrorAt, text, at)
			}
			st.Upstreams = append(st.Upstreams, u)
		}
	}
	return st
}

// unixTime is ns since the epoch as a time; zero for 0.
func unixTime(ns int64) time.Time {
	if ns == 0 {
		return time.Time{}
	}
	return time.Unix(0, ns)
}
