//go:build cluster

package cluster

import (
	"testing"
	"time"

	"fieldlink/packet"
)

// A packet the gateway stored and still holds in its buffer when it stops
// waits for the next start: the ledger counts it left, not lost, and only
// a packet neither received nor left is lost. Under load the last packets
// of a run were stored after the catch-up wait and were still queued at the
// stop ("gateway stopped queued=3"), which the run counted as 3 lost.
func TestLedgerLeftInBufferIsNotLost(t *testing.T) {
	led := newLedger()
	now := time.Now()
	line := func(seq uint64) []byte {
		p := packet.Packet{At: now, IDField: "FarmId", SiteID: "F1", DataType: "Weather", GatewayID: "gw", DeviceID: "th-1", Epoch: "e1", Seq: seq,
			Fields: []packet.Field{{Name: "T", Value: packet.Int(20)}}}
		return p.AppendJSON(nil, packet.Strings)
	}
	for seq := uint64(1); seq <= 3; seq++ {
		led.stored(line(seq), now)
	}
	led.received("fieldlink/F1/gw/Weather", line(1), now)
	led.leftInBuffer(line(2))
	tot := led.totals()
	if tot.lost != 1 || tot.left != 1 || tot.received != 1 || len(tot.problems) != 0 {
		t.Fatalf("3 stored, 1 received, 1 in the buffer: lost %d, left %d, received %d, problems %q; want 1, 1, 1, none", tot.lost, tot.left, tot.received, tot.problems)
	}
	if n := led.missing(now.Add(-time.Second), now); n != 1 {
		t.Errorf("missing: %d, want 1 (the packet in the buffer is not waited for)", n)
	}
	led.leftInBuffer(line(9))
	if p := led.totals().problems; len(p) != 1 {
		t.Errorf("a packet in the buffer that was never printed: problems %q, want one", p)
	}
}
