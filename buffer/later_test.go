package buffer

import (
	"slices"
	"testing"
	"time"

	"fieldlink/internal/testtool"
	"fieldlink/packet"
)

// AckLater's deletions take no commit of their own: they ride on the next
// append's, and the records are hidden from Lease before that.
func TestAckLaterRidesOnTheNextCommit(t *testing.T) {
	b, _ := newT(t, Options{laterDelay: time.Hour})
	s1 := mustAppend(t, b, testPacket("one", false))
	s2 := mustAppend(t, b, testPacket("two", false))
	s3 := mustAppend(t, b, testPacket("three", false))
	if recs, err := b.Lease(2); err != nil || !slices.Equal(seqsOf(recs), []uint64{s1, s2}) {
		t.Fatalf("Lease: %v, %v", seqsOf(recs), err)
	}
	before := b.Stats()
	if err := b.AckLater(s1, s2); err != nil {
		t.Fatal(err)
	}
	b.Release(s1, s2) // acked records stay hidden all the same
	if recs, _ := b.Peek(10); !slices.Equal(seqsOf(recs), []uint64{s3}) {
		t.Fatalf("Peek after AckLater: %v, want [%d]", seqsOf(recs), s3)
	}
	s4 := mustAppend(t, b, testPacket("four", false))
	st := b.Stats()
	if c := st.Commits - before.Commits; c != 1 {
		t.Fatalf("an append after AckLater took %d commits, want 1 (the acks ride on it)", c)
	}
	if got := seqsOf(all(t, b)); !slices.Equal(got, []uint64{s3, s4}) || b.Len() != 2 || st.Acks-before.Acks != 2 {
		t.Fatalf("after the append's commit: %v, Len %d, acks %d; want [%d %d], 2, 2", got, b.Len(), st.Acks-before.Acks, s3, s4)
	}
	if st.Leased != 0 {
		t.Fatalf("%d leases left after the acks committed", st.Leased)
	}
}

// With no append to ride on, AckLater's deletions get a commit of their own
// after a while: one.
func TestAckLaterCommitsAlone(t *testing.T) {
	b, _ := newT(t, Options{laterDelay: 20 * time.Millisecond})
	s1 := mustAppend(t, b, testPacket("one", false))
	s2 := mustAppend(t, b, testPacket("two", false))
	before := b.Stats().Commits
	if err := b.AckLater(s1); err != nil {
		t.Fatal(err)
	}
	// Acknowledged: no longer waiting for an upstream, though its
	// deletion is not committed yet.
	testtool.WaitFor(t, 10*time.Second, "Len and Stats to leave out the acknowledged record", func() bool {
		st := b.Stats()
		return b.Len() == 1 && st.Normal+st.Alarms == 1 && st.Leased == 0
	})
	testtool.WaitFor(t, 10*time.Second, "the deletion's commit", func() bool { return b.Stats().Acks > 0 })
	time.Sleep(50 * time.Millisecond) // a second commit, were there one, would come now
	if c := b.Stats().Commits - before; c != 1 {
		t.Fatalf("%d commits for one AckLater, want 1", c)
	}
	if got := seqsOf(all(t, b)); !slices.Equal(got, []uint64{s2}) {
		t.Fatalf("left: %v, want [%d]", got, s2)
	}
}

// A thousand waiting deletions are committed at once, without waiting
// for the delay: a backlog drained by AckLater alone does not pile up in
// memory.
func TestAckLaterCommitsAThousandAtOnce(t *testing.T) {
	b, _ := newT(t, Options{laterDelay: time.Hour, MaxBytes: 64 << 20})
	var seqs []uint64
	ps := make([]*packet.Packet, 0, 2*maxBatch)
	for i := range 2 * maxBatch {
		ps = append(ps, testPacket("p", i < 0))
	}
	for i := 0; i < len(ps); i += maxBatch {
		if err := b.AppendAll(t.Context(), ps[i:i+maxBatch]...); err != nil {
			t.Fatal(err)
		}
	}
	for _, p := range ps {
		seqs = append(seqs, p.Seq)
	}
	for _, s := range seqs {
		if err := b.AckLater(s); err != nil {
			t.Fatal(err)
		}
	}
	testtool.WaitFor(t, 10*time.Second, "the deletions' commit", func() bool { return b.Len() <= maxBatch })
}

// Close commits the deletions still waiting: they are gone after a reopen.
func TestAckLaterIsCommittedByClose(t *testing.T) {
	b, path := newT(t, Options{laterDelay: time.Hour})
	s1 := mustAppend(t, b, testPacket("one", false))
	s2 := mustAppend(t, b, testPacket("two", false))
	if err := b.AckLater(s1); err != nil {
		t.Fatal(err)
	}
	if err := b.Close(); err != nil {
		t.Fatal(err)
	}
	b = openT(t, path, Options{})
	if got := seqsOf(all(t, b)); !slices.Equal(got, []uint64{s2}) {
		t.Fatalf("after reopen: %v, want [%d]", got, s2)
	}
}

// Rendering a packet allocates its record once, however many fields it
// has: the buffer is sized for the packet, not grown.
func TestRenderAllocatesOnce(t *testing.T) {
	b, _ := newT(t, Options{})
	for _, n := range []int{1, 20, 100, 125} {
		p := testPacket("station-01", false)
		p.Fields = nil
		for i := range n {
			p.Fields = append(p.Fields, packet.Field{Name: "SoilConductivity" + string(rune('A'+i%26)), Value: packet.Float(-12345.678, 3)})
		}
		var rec pending
		now := time.Now()
		allocs := testing.AllocsPerRun(20, func() {
			if err := b.render(&rec, p, now); err != nil {
				t.Fatal(err)
			}
		})
		if allocs > 1 {
			t.Errorf("%d fields: %.0f allocations per render, want 1", n, allocs)
		}
	}
}
