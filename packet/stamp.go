package packet

import (
	"sync/atomic"
	"time"
)

// Stamper fills in the site-wide DataHead fields of packets built by the
// sensors, and numbers them. Safe for concurrent use.
type Stamper struct {
	IDField   string         // FarmId or MineId
	SiteID    string         // the farm or mine id
	GatewayID string         // this gateway
	Loc       *time.Location // the site's time zone
	Epoch     string         // set when the sequence restarted (see buffer)

	// Next returns the next sequence number; nil numbers from 1 in memory
	// (enough for poll and demo; the daemon numbers from the buffer so
	// that numbers are never reused across restarts).
	Next func() uint64
	seq  atomic.Uint64
}

// Stamp sets p's site fields and sequence number.
func (s *Stamper) Stamp(p *Packet) {
	p.IDField, p.SiteID, p.GatewayID, p.Loc, p.Epoch = s.IDField, s.SiteID, s.GatewayID, s.Loc, s.Epoch
	if s.Next != nil {
		p.Seq = s.Next()
	} else {
		p.Seq = s.seq.Add(1)
	}
}
