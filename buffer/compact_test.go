package buffer

import (
	"context"
	"errors"
	"fmt"
	"os"
	"slices"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"fieldlink/internal/testtool"
	"fieldlink/packet"
)

func TestCompaction(t *testing.T) {
	b, path := newT(t, Options{CompactMinSize: 1 << 20})
	var ps []*packet.Packet
	for i := range 6000 {
		ps = append(ps, testPacket(fmt.Sprintf("old-%04d", i), i%100 == 0))
	}
	for i := 0; i < len(ps); i += 500 {
		if err := b.AppendAll(context.Background(), ps[i:i+500]...); err != nil {
			t.Fatal(err)
		}
	}
	before := fileSize(t, path)
	if before < 2<<20 {
		t.Fatalf("file only %d bytes", before)
	}
	if err := b.PutAux("model", []byte("weights")); err != nil {
		t.Fatal(err)
	}
	// Lease everything, then ack almost everything while another goroutine
	// keeps appending.
	if recs, _ := b.Lease(len(ps)); len(recs) != len(ps) {
		t.Fatalf("leased %d of %d", len(recs), len(ps))
	}
	stop := make(chan struct{})
	var appended []uint64
	var nAppended atomic.Int64
	var wg sync.WaitGroup
	wg.Go(func() {
		// Bounded: compaction waits for the live bytes to settle (a
		// second or more), and a slow machine must not fill the file
		// meanwhile with what the compaction is meant to shrink.
		for i := 0; i < 300; i++ {
			select {
			case <-stop:
				return
			default:
			}
			appended = append(appended, mustAppend(t, b, testPacket(fmt.Sprintf("new-%d", i), false)))
			nAppended.Add(1)
			time.Sleep(5 * time.Millisecond) // pacing, not synchronisation: spread over the compaction, a second or so away
		}
	})
	var ack []uint64
	for _, p := range ps[:5980] {
		ack = append(ack, p.Seq)
	}
	if err := b.Ack(ack...); err != nil {
		t.Fatal(err)
	}
	testtool.WaitFor(t, 10*time.Second, "compaction", func() bool { return b.Stats().Compactions == 1 })
	// Appends into the compacted file too, unless the appender is done.
	n := nAppended.Load()
	testtool.WaitFor(t, 10*time.Second, "an append after the compaction", func() bool {
		return nAppended.Load() >= min(n+3, 300)
	})
	close(stop)
	wg.Wait()
	after := fileSize(t, path)
	if after*4 > before {
		t.Fatalf("file %d bytes before, %d after compaction", before, after)
	}
	got := seqsOf(all(t, b))
	want := []uint64{}
	for _, p := range ps[5980:] {
		want = append(want, p.Seq)
	}
	want = append(want, appended...)
	slices.Sort(want)
	slices.Sort(got)
	if !slices.Equal(got, want) {
		t.Fatalf("after compaction: %d records, want %d", len(got), len(want))
	}
	// Leases stay valid across the swap: the 20 leased survivors are not
	// returned; the new records are.
	recs, _ := b.Lease(100000)
	if !slices.Equal(seqsOf(recs), appended) {
		t.Fatalf("Lease after compaction returned %d records, want the %d new ones", len(recs), len(appended))
	}
	if v, err := b.Aux("model"); err != nil || string(v) != "weights" {
		t.Fatalf("aux after compaction: %q, %v", v, err)
	}
	t.Logf("compaction: %d → %d bytes, %d appends meanwhile", before, after, len(appended))
	if _, err := os.Stat(path + compactSuffix); !errors.Is(err, os.ErrNotExist) {
		t.Fatalf("compaction left %s behind", path+compactSuffix)
	}
}
