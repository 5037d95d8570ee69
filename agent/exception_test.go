package agent

import (
	"fmt"
	"strings"
	"sync"
	"testing"
	"time"

	"fieldlink/metrics"
	"fieldlink/packet"
)

// On a running gateway, the packets held back never reach the buffer: the
// stored ones number 1, 2, 3, … without a gap, and polled = stored + held.
func TestReportByExceptionRunningGatewayTakesNoSeq(t *testing.T) {
	up := newIngest(t, 204)
	c := site(t, emulate(t, "generic-mine-methane"), "uplink:\n  upstreams:\n    - url: "+up.URL+"/ingest\n")
	d := &c.Buses[0].Devices[0]
	band := 100.0
	d.Deadband, d.Heartbeat = &band, time.Hour
	var mu sync.Mutex
	var polled int
	var seqs []uint64
	enough := make(chan struct{})
	g, err := Start(c, Options{
		OnPolled: func(*packet.Packet) {
			mu.Lock()
			defer mu.Unlock()
			if polled++; polled == 10 {
				close(enough)
			}
		},
		OnPacket: func(p *packet.Packet) {
			mu.Lock()
			defer mu.Unlock()
			seqs = append(seqs, p.Seq)
		},
	})
	if err != nil {
		t.Fatal(err)
	}
	<-enough
	g.StopPolling()
	if err := g.Stop(); err != nil {
		t.Fatal(err)
	}
	mu.Lock()
	defer mu.Unlock()
	if len(seqs) == 0 || len(seqs) >= polled || uint64(polled-len(seqs)) != g.HeldBack() {
		t.Fatalf("polled %d, stored %d, held back %d", polled, len(seqs), g.HeldBack())
	}
	for i, s := range seqs {
		if s != uint64(i+1) {
			t.Fatalf("stored Seqs %v: a held-back packet took a number", seqs)
		}
	}
	var m strings.Builder
	if err := metrics.Write(&m, time.Now(), collectors(g.Sources())...); err != nil {
		t.Fatal(err)
	}
	if want := fmt.Sprintf("\nfieldlink_packets_held_back_total %d\n", polled-len(seqs)); !strings.Contains(m.String(), want) {
		t.Errorf("/metrics lacks%s", want)
	}
}
