package buffer

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"testing"
	"time"

	"fieldlink/internal/testtool"
	"fieldlink/packet"
)

func TestDeliveryOrder(t *testing.T) {
	// Appended: n0 A1 n2 n3 A4 n5 (A = alarm).
	alarm := []bool{false, true, false, false, true, false}
	for _, tc := range []struct {
		order Order
		want  []string
	}{
		{OldestFirst, []string{"d-1", "d-4", "d-0", "d-2", "d-3", "d-5"}},
		{NewestFirst, []string{"d-1", "d-4", "d-5", "d-3", "d-2", "d-0"}},
	} {
		t.Run(tc.order.String(), func(t *testing.T) {
			b, _ := newT(t, Options{Order: tc.order})
			for i, id := range ids("d", len(alarm)) {
				mustAppend(t, b, testPacket(id, alarm[i]))
			}
			check := func(what string, recs []Record) {
				t.Helper()
				var got []string
				for _, r := range recs {
					got = append(got, deviceOf(t, r))
					if r.Alarm != (got[len(got)-1] == "d-1" || got[len(got)-1] == "d-4") {
						t.Errorf("%s: %s: Alarm %v", what, got[len(got)-1], r.Alarm)
					}
				}
				if !slices.Equal(got, tc.want[:len(got)]) || len(got) == 0 {
					t.Errorf("%s: got %v, want a prefix of %v", what, got, tc.want)
				}
			}
			peek, _ := b.Peek(100)
			check("Peek", peek)
			check("Each", all(t, b))
			var next []Record
			for {
				recs, err := b.Lease(2) // in pieces: leased records are skipped
				if err != nil {
					t.Fatal(err)
				}
				if len(recs) == 0 {
					break
				}
				next = append(next, recs...)
			}
			check("Lease", next)
			if len(next) != len(tc.want) {
				t.Errorf("Lease returned %d records, want %d", len(next), len(tc.want))
			}
		})
	}
}

func TestLeases(t *testing.T) {
	b, path := newT(t, Options{})
	var seqs []uint64
	for _, id := range ids("d", 5) {
		seqs = append(seqs, mustAppend(t, b, testPacket(id, false)))
	}
	peek, _ := b.Peek(10)
	if len(peek) != 5 {
		t.Fatalf("Peek: %d records", len(peek))
	}
	first, _ := b.Lease(2)
	second, _ := b.Lease(2)
	if !slices.Equal(seqsOf(first), seqs[:2]) || !slices.Equal(seqsOf(second), seqs[2:4]) {
		t.Fatalf("Lease: %v then %v", seqsOf(first), seqsOf(second))
	}
	if peek, _ := b.Peek(10); !slices.Equal(seqsOf(peek), seqs[4:]) {
		t.Fatalf("Peek after leases: %v", seqsOf(peek))
	}
	b.Release(seqs[1], 12345) // an unknown seq is ignored
	if recs, _ := b.Lease(10); !slices.Equal(seqsOf(recs), []uint64{seqs[1], seqs[4]}) {
		t.Fatalf("Lease after Release: %v", seqsOf(recs))
	}
	if recs, _ := b.Lease(10); len(recs) != 0 {
		t.Fatalf("everything is leased, Lease returned %v", seqsOf(recs))
	}
	if err := b.Ack(seqs[0], seqs[0], 777); err != nil { // duplicates and unknown seqs are fine
		t.Fatal(err)
	}
	b.Release(seqs[0]) // acked: stays gone
	if recs, _ := b.Lease(10); len(recs) != 0 {
		t.Fatalf("Lease returned %v", seqsOf(recs))
	}
	if st := b.Stats(); st.Leased != 4 || b.Len() != 4 {
		t.Fatalf("Leased %d, Len %d; want 4, 4", st.Leased, b.Len())
	}
	// Leases live in memory: after a restart every record is delivered again.
	b.Close()
	b = openT(t, path, Options{})
	if recs, _ := b.Lease(10); !slices.Equal(seqsOf(recs), seqs[1:]) {
		t.Fatalf("Lease after reopen: %v, want %v", seqsOf(recs), seqs[1:])
	}
}

func TestAckDeletes(t *testing.T) {
	for _, d := range []Durability{Always, Interval} {
		t.Run(d.String(), func(t *testing.T) {
			b, path := newT(t, Options{Durability: d, SyncEvery: 20 * time.Millisecond})
			var seqs []uint64
			for i, id := range ids("d", 10) {
				seqs = append(seqs, mustAppend(t, b, testPacket(id, i%3 == 0)))
			}
			testtool.WaitFor(t, 10*time.Second, "commit", func() bool { return b.Len() == 10 })
			if err := b.Ack(seqs[2], seqs[3], seqs[9]); err != nil {
				t.Fatal(err)
			}
			// Acked records are not delivered again, even before the
			// deletion commits.
			recs, _ := b.Peek(100)
			if got := seqsOf(recs); slices.Contains(got, seqs[2]) || slices.Contains(got, seqs[9]) || len(got) != 7 {
				t.Fatalf("Peek after Ack: %v", got)
			}
			testtool.WaitFor(t, 10*time.Second, "ack commit", func() bool { return b.Len() == 7 })
			b.Close()
			b = openT(t, path, Options{})
			if got := seqsOf(all(t, b)); len(got) != 7 || slices.Contains(got, seqs[3]) {
				t.Fatalf("after reopen: %v", got)
			}
			if st := b.Stats(); st.Leased != 0 {
				t.Fatalf("leases survived: %d", st.Leased)
			}
		})
	}
}

// TestWait checks that Wait blocks while Lease has nothing to return, and
// wakes for an append, a Release and Close. Each wake-up is tested on a Wait
// that the waiting hook saw block, so none can pass because Wait had not
// started yet.
func TestWait(t *testing.T) {
	blocked := make(chan struct{}, 1)
	b, _ := newT(t, Options{waiting: func() {
		select {
		case blocked <- struct{}{}:
		default:
		}
	}})
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Millisecond)
	defer cancel()
	if err := b.Wait(ctx); !errors.Is(err, context.DeadlineExceeded) {
		t.Fatalf("Wait on an empty buffer: %v", err)
	}
	got := make(chan error, 1)
	// wait starts a Wait and returns once it blocks; it fails the test if
	// Wait returns instead.
	wait := func(what string) {
		t.Helper()
		select {
		case <-blocked: // from an earlier Wait
		default:
		}
		go func() { got <- b.Wait(context.Background()) }()
		select {
		case <-blocked:
		case err := <-got:
			t.Fatalf("Wait returned %v %s", err, what)
		}
	}
	// woke returns what the blocked Wait returned; a Wait that was not
	// woken fails the test rather than hang it.
	woke := func(by string) error {
		t.Helper()
		select {
		case err := <-got:
			return err
		case <-time.After(10 * time.Second):
			t.Fatalf("%s did not wake Wait", by)
			return nil
		}
	}
	wait("on an empty buffer")
	seq := mustAppend(t, b, testPacket("a", false))
	if err := woke("Append"); err != nil {
		t.Fatalf("Wait: %v", err)
	}
	b.Lease(1)
	wait("with everything leased")
	b.Release(seq)
	if err := woke("Release"); err != nil {
		t.Fatalf("Wait after Release: %v", err)
	}
	b.Lease(1)
	wait("with everything leased")
	b.Close()
	if err := woke("Close"); !errors.Is(err, ErrClosed) {
		t.Fatalf("Wait across Close: %v", err)
	}
}

func TestEachPagesThroughLargeQueues(t *testing.T) {
	for _, order := range []Order{OldestFirst, NewestFirst} {
		t.Run(order.String(), func(t *testing.T) {
			b, _ := newT(t, Options{Order: order})
			const n = 3*eachChunk + 17
			var ps []*packet.Packet
			for i := range n {
				ps = append(ps, testPacket(fmt.Sprint("d-", i), i%7 == 4))
			}
			if err := b.AppendAll(context.Background(), ps...); err != nil {
				t.Fatal(err)
			}
			var alarms, normal []uint64
			for _, p := range ps {
				if p.Alarm() {
					alarms = append(alarms, p.Seq)
				} else {
					normal = append(normal, p.Seq)
				}
			}
			if order == NewestFirst {
				slices.Reverse(normal)
			}
			want := append(alarms, normal...)
			if got := seqsOf(all(t, b)); !slices.Equal(got, want) {
				t.Fatalf("Each: %d records, want %d in delivery order", len(got), len(want))
			}
			// Each stops at the first error and returns it.
			stop := errors.New("stop")
			calls := 0
			if err := b.Each(func(Record) error { calls++; return stop }); err != stop || calls != 1 {
				t.Fatalf("Each: %v after %d calls", err, calls)
			}
			// Lease in small pieces, past leased records, agrees.
			var next []uint64
			for {
				recs, err := b.Lease(100)
				if err != nil {
					t.Fatal(err)
				}
				if len(recs) == 0 {
					break
				}
				next = append(next, seqsOf(recs)...)
			}
			if !slices.Equal(next, want) {
				t.Fatalf("Lease: %d records, want %d in delivery order", len(next), len(want))
			}
		})
	}
}
