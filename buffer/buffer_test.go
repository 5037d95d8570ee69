package buffer

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"slices"
	"sync"
	"sync/atomic"
	"syscall"
	"testing"
	"time"

	"fieldlink/internal/testtool"
	"fieldlink/packet"
)

func TestAppendStoresJSONWithSeqAndEpoch(t *testing.T) {
	for _, enc := range []packet.Encoding{packet.Strings, packet.Numbers} {
		t.Run(fmt.Sprint(enc), func(t *testing.T) {
			b, _ := newT(t, Options{Encoding: enc})
			if len(b.Epoch()) != 8 {
				t.Fatalf("epoch %q, want 8 hex digits", b.Epoch())
			}
			var want [][]byte
			for i, id := range ids("dev", 12) {
				p := testPacket(id, false)
				p.Seq, p.Epoch = 999, "stale" // the buffer's numbering wins
				seq := mustAppend(t, b, p)
				if seq != uint64(i+1) || p.Seq != seq || p.Epoch != b.Epoch() {
					t.Fatalf("append %d: seq %d, p.Seq %d, p.Epoch %q", i, seq, p.Seq, p.Epoch)
				}
				want = append(want, wantJSON(p, seq, b.Epoch(), enc))
			}
			recs := all(t, b)
			if len(recs) != len(want) {
				t.Fatalf("%d records, want %d", len(recs), len(want))
			}
			for i, r := range recs {
				if !bytes.Equal(r.Data, want[i]) {
					t.Errorf("record %d:\n got %s\nwant %s", r.Seq, r.Data, want[i])
				}
				if r.Alarm || !r.At.Equal(time.Date(2026, 11, 29, 8, 0, 0, 0, time.UTC)) {
					t.Errorf("record %d: alarm %v at %v", r.Seq, r.Alarm, r.At)
				}
				p, err := packet.Decode(r.Data)
				if err != nil || p.Seq != r.Seq || p.Epoch != b.Epoch() {
					t.Errorf("record %d decodes to seq %d epoch %q, %v", r.Seq, p.Seq, p.Epoch, err)
				}
			}
			wantBytes := int64(0)
			for _, w := range want {
				wantBytes += int64(keySize + headerSize + len(w))
			}
			if b.Len() != len(want) || b.Bytes() != wantBytes {
				t.Errorf("Len %d Bytes %d, want %d %d", b.Len(), b.Bytes(), len(want), wantBytes)
			}
		})
	}
}

func TestAppendDoesNotKeepThePacket(t *testing.T) {
	b, _ := newT(t, Options{})
	p := testPacket("a", false)
	seq := mustAppend(t, b, p)
	want := wantJSON(p, seq, b.Epoch(), 0)
	p.DeviceID = "changed"
	p.Fields[0].Name = "changed"
	recs := all(t, b)
	if !bytes.Equal(recs[0].Data, want) {
		t.Fatalf("stored record changed with the packet: %s", recs[0].Data)
	}
}

func TestAppendWithoutReadingTimeUsesNow(t *testing.T) {
	now := time.Date(2030, 1, 2, 3, 4, 5, 0, time.UTC)
	b, _ := newT(t, Options{Now: func() time.Time { return now }})
	p := testPacket("a", false)
	p.At = time.Time{}
	mustAppend(t, b, p)
	if r := all(t, b)[0]; !r.At.Equal(now) {
		t.Fatalf("At %v, want %v", r.At, now)
	}
}

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
				recs, err := b.Next(2) // in pieces: leased records are skipped
				if err != nil {
					t.Fatal(err)
				}
				if len(recs) == 0 {
					break
				}
				next = append(next, recs...)
			}
			check("Next", next)
			if len(next) != len(tc.want) {
				t.Errorf("Next returned %d records, want %d", len(next), len(tc.want))
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
	first, _ := b.Next(2)
	second, _ := b.Next(2)
	if !slices.Equal(seqsOf(first), seqs[:2]) || !slices.Equal(seqsOf(second), seqs[2:4]) {
		t.Fatalf("Next: %v then %v", seqsOf(first), seqsOf(second))
	}
	if peek, _ := b.Peek(10); !slices.Equal(seqsOf(peek), seqs[4:]) {
		t.Fatalf("Peek after leases: %v", seqsOf(peek))
	}
	b.Release(seqs[1], 12345) // an unknown seq is ignored
	if recs, _ := b.Next(10); !slices.Equal(seqsOf(recs), []uint64{seqs[1], seqs[4]}) {
		t.Fatalf("Next after Release: %v", seqsOf(recs))
	}
	if recs, _ := b.Next(10); len(recs) != 0 {
		t.Fatalf("everything is leased, Next returned %v", seqsOf(recs))
	}
	if err := b.Ack(seqs[0], seqs[0], 777); err != nil { // duplicates and unknown seqs are fine
		t.Fatal(err)
	}
	b.Release(seqs[0]) // acked: stays gone
	if recs, _ := b.Next(10); len(recs) != 0 {
		t.Fatalf("Next returned %v", seqsOf(recs))
	}
	if st := b.Stats(); st.Leased != 4 || b.Len() != 4 {
		t.Fatalf("Leased %d, Len %d; want 4, 4", st.Leased, b.Len())
	}
	// Leases live in memory: after a restart every record is delivered again.
	b.Close()
	b = openT(t, path, Options{})
	if recs, _ := b.Next(10); !slices.Equal(seqsOf(recs), seqs[1:]) {
		t.Fatalf("Next after reopen: %v, want %v", seqsOf(recs), seqs[1:])
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

func TestSeqAndEpochAcrossReopen(t *testing.T) {
	path := filepath.Join(t.TempDir(), "sub", "dir", "buffer.db") // Open creates the directories
	b := openT(t, path, Options{})
	epoch := b.Epoch()
	var last uint64
	for round := range 4 {
		for i := range 5 {
			seq := mustAppend(t, b, testPacket(fmt.Sprint(round, i), i == 2))
			if seq <= last {
				t.Fatalf("seq %d after %d", seq, last)
			}
			last = seq
		}
		// Ack everything: the sequence must not restart when the queues
		// are empty.
		if err := b.Ack(seqsOf(all(t, b))...); err != nil {
			t.Fatal(err)
		}
		b.Close()
		b = openT(t, path, Options{})
		if b.Epoch() != epoch {
			t.Fatalf("epoch changed across reopen: %q → %q", epoch, b.Epoch())
		}
		if st := b.Stats(); st.LastSeq != last {
			t.Fatalf("LastSeq %d, want %d", st.LastSeq, last)
		}
	}
}

func TestMaxBytesDropOldest(t *testing.T) {
	sizeN := recordSizeOf(t, testPacket("n-00", false))
	sizeA := recordSizeOf(t, testPacket("a-00", true))
	max := 2*sizeA + 8*sizeN
	b, _ := newT(t, Options{MaxBytes: max})
	for _, id := range []string{"a-00", "a-01"} {
		mustAppend(t, b, testPacket(id, true))
	}
	for i := range 14 {
		mustAppend(t, b, testPacket(fmt.Sprintf("n-%02d", i), false))
	}
	// The alarms stay; the newest normal records that fit stay.
	got := devices(t, all(t, b))
	normals := got[2:]
	if !slices.Equal(got[:2], []string{"a-00", "a-01"}) || len(normals) < 8 ||
		!slices.Equal(normals, ids2("n-", 14-len(normals), 14)) {
		t.Fatalf("after overflow: %v", got)
	}
	st := b.Stats()
	if st.EvictedMaxBytes != uint64(14-len(normals)) || st.RejectedFull != 0 || st.Bytes > max {
		t.Fatalf("stats: evicted %d (want %d), rejected %d, bytes %d > %d",
			st.EvictedMaxBytes, 14-len(normals), st.RejectedFull, st.Bytes, max)
	}
	// Alarms go last: alarms push out every normal record before the
	// first alarm goes.
	for i := 2; i < 12; i++ {
		mustAppend(t, b, testPacket(fmt.Sprintf("a-%02d", i), true))
		recs := all(t, b)
		if !recs[0].Alarm || deviceOf(t, recs[0]) != "a-00" && slices.ContainsFunc(recs, func(r Record) bool { return !r.Alarm }) {
			t.Fatalf("an alarm was evicted while normal records were left: %v", devices(t, recs))
		}
	}
	got = devices(t, all(t, b))
	if len(got) > 10 || !slices.Equal(got, ids2("a-", 12-len(got), 12)) {
		t.Fatalf("after the alarms: %v", got)
	}
	// Only alarms left: a normal packet that does not fit in the room left
	// is rejected, an alarm gets in.
	room := max - b.Bytes()
	n99 := testPacket("n-99", false)
	n99.Fields = append(n99.Fields, packet.Field{Name: "Pad", Value: packet.String(string(bytes.Repeat([]byte("x"), int(room))))})
	if _, err := b.Append(context.Background(), n99); !errors.Is(err, ErrFull) {
		t.Fatalf("normal packet into a buffer of alarms: %v, want ErrFull", err)
	}
	mustAppend(t, b, testPacket("a-12", true))
	st = b.Stats()
	if st.RejectedFull != 1 || st.Normal != 0 || st.Bytes > max || st.EvictedMaxBytes != uint64(2+14+11-st.Alarms) {
		t.Fatalf("stats: %+v", st)
	}
}

func TestMaxBytesRejectNew(t *testing.T) {
	sizeN := recordSizeOf(t, testPacket("n-00", false))
	max := 4 * sizeN
	b, path := newT(t, Options{MaxBytes: max, WhenFull: RejectNew})
	for i := range 4 {
		mustAppend(t, b, testPacket(fmt.Sprintf("n-%02d", i), false))
	}
	for i := 4; i < 7; i++ {
		p := testPacket(fmt.Sprintf("n-%02d", i), false)
		if _, err := b.Append(context.Background(), p); !errors.Is(err, ErrFull) || p.Seq != 0 {
			t.Fatalf("append into a full buffer: %v (Seq %d), want ErrFull", err, p.Seq)
		}
	}
	// An alarm still gets in, evicting the oldest normal records.
	mustAppend(t, b, testPacket("a-00", true))
	got := devices(t, all(t, b))
	normals := got[1:]
	if got[0] != "a-00" || len(normals) == 0 || len(normals) >= 4 || !slices.Equal(normals, ids2("n-", 4-len(normals), 4)) {
		t.Fatalf("got %v", got)
	}
	evicted := uint64(4 - len(normals))
	st := b.Stats()
	if st.RejectedFull != 3 || st.EvictedMaxBytes != evicted {
		t.Fatalf("rejected %d, evicted %d; want 3, %d", st.RejectedFull, st.EvictedMaxBytes, evicted)
	}
	// A record larger than MaxBytes is rejected under either policy.
	big := testPacket("big", true)
	big.Fields = append(big.Fields, packet.Field{Name: "Blob", Value: packet.String(string(make([]byte, 5*sizeN)))})
	if _, err := b.Append(context.Background(), big); !errors.Is(err, ErrFull) {
		t.Fatalf("huge packet: %v, want ErrFull", err)
	}
	// The counters survive a restart.
	b.Close()
	b = openT(t, path, Options{MaxBytes: max, WhenFull: RejectNew})
	if st := b.Stats(); st.RejectedFull != 4 || st.EvictedMaxBytes != evicted {
		t.Fatalf("after reopen: rejected %d, evicted %d", st.RejectedFull, st.EvictedMaxBytes)
	}
}

func TestAppendAll(t *testing.T) {
	size := recordSizeOf(t, testPacket("n-00", false))
	b, _ := newT(t, Options{MaxBytes: 3 * size, WhenFull: RejectNew})
	var ps []*packet.Packet
	for _, id := range []string{"n-00", "n-01", "n-02", "n-03", "n-04"} {
		ps = append(ps, testPacket(id, false))
	}
	err := b.AppendAll(context.Background(), ps...)
	if !errors.Is(err, ErrFull) {
		t.Fatalf("AppendAll: %v, want ErrFull", err)
	}
	for i, p := range ps {
		if (p.Seq != 0) != (i < 3) {
			t.Errorf("packet %d: Seq %d", i, p.Seq)
		}
	}
	if st := b.Stats(); st.Commits != 1 || st.RejectedFull != 2 || b.Len() != 3 {
		t.Fatalf("commits %d, rejected %d, len %d; want 1, 2, 3", st.Commits, st.RejectedFull, b.Len())
	}
}

func TestMaxAge(t *testing.T) {
	var now atomic.Int64
	start := time.Date(2026, 1, 1, 0, 0, 0, 0, time.UTC)
	now.Store(start.UnixNano())
	clock := func() time.Time { return time.Unix(0, now.Load()) }
	b, _ := newT(t, Options{MaxAge: 10 * time.Second, Now: clock}) // checked every second
	for i := range 6 {
		p := testPacket(fmt.Sprintf("d-%d", i), i == 0)
		p.At = start.Add(time.Duration(i) * 2 * time.Second)
		mustAppend(t, b, p)
	}
	// At 0:16 everything read before 0:06 is too old: d-0 (an alarm) to d-2.
	now.Store(start.Add(16 * time.Second).UnixNano())
	testtool.WaitFor(t, 10*time.Second, "age eviction", func() bool { return b.Len() == 3 })
	if got := devices(t, all(t, b)); !slices.Equal(got, []string{"d-3", "d-4", "d-5"}) {
		t.Fatalf("left: %v", got)
	}
	if st := b.Stats(); st.EvictedMaxAge != 3 || st.EvictedMaxBytes != 0 {
		t.Fatalf("evicted by age %d, by bytes %d", st.EvictedMaxAge, st.EvictedMaxBytes)
	}
}

// TestIntervalAppendsDoNotWaitForACommit checks that Interval appends are
// answered before their commit: with a SyncEvery that never ends, 50
// appends return with nothing committed, and the one commit, at Close,
// stores them all. BenchmarkAppend/interval measures how fast they return.
func TestIntervalAppendsDoNotWaitForACommit(t *testing.T) {
	b, path := newT(t, Options{Durability: Interval, SyncEvery: 24 * time.Hour})
	// An append that waited for its commit would wait a day: give up.
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	var seqs []uint64
	for i := range 50 {
		seq, err := b.Append(ctx, testPacket(fmt.Sprint(i), false))
		if err != nil {
			t.Fatalf("Interval append %d: %v", i, err)
		}
		seqs = append(seqs, seq)
	}
	if !slices.IsSorted(seqs) || seqs[0] != 1 || seqs[49] != 50 {
		t.Fatalf("seqs %v", seqs)
	}
	if st := b.Stats(); st.Commits != 0 || b.Len() != 0 {
		t.Fatalf("%d commits, Len %d before SyncEvery passed", st.Commits, b.Len())
	}
	if err := b.Close(); err != nil {
		t.Fatal(err)
	}
	if st := b.Stats(); st.Commits != 1 {
		t.Fatalf("%d commits for 50 appends within one window", st.Commits)
	}
	b = openT(t, path, Options{})
	if got := seqsOf(all(t, b)); !slices.Equal(got, seqs) {
		t.Fatalf("after Close: %v", got)
	}
}

// TestIntervalCommitsWithinSyncEvery checks that an Interval append is
// committed by itself once SyncEvery passes, without another append or a
// Close.
func TestIntervalCommitsWithinSyncEvery(t *testing.T) {
	b, _ := newT(t, Options{Durability: Interval, SyncEvery: 20 * time.Millisecond})
	mustAppend(t, b, testPacket("a", false))
	testtool.WaitFor(t, 10*time.Second, "the commit", func() bool { return b.Len() == 1 })
}

func TestGroupCommit(t *testing.T) {
	b, _ := newT(t, Options{})
	var wg sync.WaitGroup
	for g := range 16 {
		wg.Go(func() {
			for i := range 20 {
				mustAppend(t, b, testPacket(fmt.Sprint(g, "-", i), false))
			}
		})
	}
	wg.Wait()
	st := b.Stats()
	if b.Len() != 320 || st.Appends != 320 {
		t.Fatalf("len %d, appends %d", b.Len(), st.Appends)
	}
	t.Logf("320 appends from 16 goroutines: %d commits", st.Commits)
	if st.Commits >= 320 {
		t.Fatalf("%d commits for 320 concurrent appends: no group commit", st.Commits)
	}
}

func TestPurge(t *testing.T) {
	b, path := newT(t, Options{})
	for _, id := range ids("d", 30) {
		mustAppend(t, b, testPacket(id, id == "d-7"))
	}
	b.Next(5)
	n, err := b.Purge()
	if err != nil || n != 30 || b.Len() != 0 || b.Bytes() != 0 {
		t.Fatalf("Purge: %d, %v; Len %d Bytes %d", n, err, b.Len(), b.Bytes())
	}
	epoch := b.Epoch()
	b.Close()
	b = openT(t, path, Options{})
	if seq := mustAppend(t, b, testPacket("after", false)); seq != 31 || b.Epoch() != epoch {
		t.Fatalf("after purge and reopen: seq %d epoch %s; want 31 %s", seq, b.Epoch(), epoch)
	}
}

// TestWait checks that Wait blocks while Next has nothing to return, and
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
	b.Next(1)
	wait("with everything leased")
	b.Release(seq)
	if err := woke("Release"); err != nil {
		t.Fatalf("Wait after Release: %v", err)
	}
	b.Next(1)
	wait("with everything leased")
	b.Close()
	if err := woke("Close"); !errors.Is(err, ErrClosed) {
		t.Fatalf("Wait across Close: %v", err)
	}
}

func TestCloseStopsEverything(t *testing.T) {
	noLeak(t)
	path := filepath.Join(t.TempDir(), "buffer.db")
	for _, d := range []Durability{Always, Interval} {
		b, err := Open(path, Options{Durability: d, MaxAge: time.Hour, Logger: quietLogger()})
		if err != nil {
			t.Fatal(err)
		}
		mustAppend(t, b, testPacket("a", true))
		if err := b.Close(); err != nil {
			t.Fatal(err)
		}
		if err := b.Close(); err != nil {
			t.Fatalf("second Close: %v", err)
		}
		select {
		case <-b.done:
		default:
			t.Fatal("writer still running after Close")
		}
		ctx := context.Background()
		if _, err := b.Append(ctx, testPacket("b", false)); !errors.Is(err, ErrClosed) {
			t.Errorf("Append after Close: %v", err)
		}
		for name, err := range map[string]error{
			"Ack":   b.Ack(1),
			"Wait":  b.Wait(ctx),
			"Next":  second(b.Next(1)),
			"Peek":  second(b.Peek(1)),
			"Each":  b.Each(func(Record) error { return nil }),
			"Purge": second(b.Purge()),
		} {
			if !errors.Is(err, ErrClosed) {
				t.Errorf("%s after Close: %v", name, err)
			}
		}
		_ = b.Stats() // still answers
	}
	mustBeSound(t, path)
}

func second[T any](_ T, err error) error { return err }

func TestAppendContext(t *testing.T) {
	b, _ := newT(t, Options{})
	ctx, cancel := context.WithCancel(context.Background())
	cancel()
	// Either queued-then-cancelled (not stored) or refused at once.
	if _, err := b.Append(ctx, testPacket("a", false)); !errors.Is(err, context.Canceled) {
		t.Fatalf("Append with a cancelled context: %v", err)
	}
}

func TestCommitEIOIsFatal(t *testing.T) {
	var fail atomic.Bool
	path := filepath.Join(t.TempDir(), "buffer.db")
	logs := &testtool.SyncBuffer{}
	b, err := Open(path, Options{Logger: logTo(logs), failCommit: failWhen(&fail, eioAt(path))})
	if err != nil {
		t.Fatal(err)
	}
	good := mustAppend(t, b, testPacket("good", false))
	fail.Store(true)
	if _, err := b.Append(context.Background(), testPacket("bad", false)); !errors.Is(err, ErrFatal) || !errors.Is(err, syscall.EIO) {
		t.Fatalf("append on EIO: %v, want ErrFatal wrapping EIO", err)
	}
	fail.Store(false) // never retried: the buffer stays failed
	if _, err := b.Append(context.Background(), testPacket("later", false)); !errors.Is(err, ErrFatal) {
		t.Fatalf("append after EIO: %v, want ErrFatal", err)
	}
	if err := b.Ack(good); !errors.Is(err, ErrFatal) {
		t.Fatalf("ack after EIO: %v, want ErrFatal", err)
	}
	if !logged(logs, "ERROR", "fatal") || b.Stats().LastError == "" {
		t.Fatalf("EIO not logged loudly:\n%s", logs)
	}
	b.Close()
	// The restarted process finds the durable record.
	b = openT(t, path, Options{})
	if got := seqsOf(all(t, b)); !slices.Equal(got, []uint64{good}) {
		t.Fatalf("after restart: %v", got)
	}
}

func TestCommitENOSPCRecovers(t *testing.T) {
	for _, d := range []Durability{Always, Interval} {
		t.Run(d.String(), func(t *testing.T) {
			var fail atomic.Bool
			b, _ := newT(t, Options{Durability: d, SyncEvery: 10 * time.Millisecond, failCommit: failWhen(&fail, errENOSPC)})
			s1 := mustAppend(t, b, testPacket("one", false))
			s2 := mustAppend(t, b, testPacket("two", false))
			testtool.WaitFor(t, 10*time.Second, "commit", func() bool { return b.Len() == 2 })
			fail.Store(true)
			var held uint64
			if d == Always {
				if _, err := b.Append(context.Background(), testPacket("lost", false)); !errors.Is(err, ErrDiskFull) {
					t.Fatalf("append on ENOSPC: %v, want ErrDiskFull", err)
				}
			} else {
				// Answered before its commit, which fails: the buffer keeps
				// it and stores it when the disk has room again.
				held = mustAppend(t, b, testPacket("held", false))
			}
			if err := b.Ack(s1); d == Always && !errors.Is(err, ErrDiskFull) {
				t.Fatalf("ack on ENOSPC: %v, want ErrDiskFull", err)
			}
			// Interval: the failed commit makes the next appends wait for
			// their own commit, so they are told.
			testtool.WaitFor(t, 10*time.Second, "a failed commit", func() bool { return b.Stats().LastError != "" })
			if _, err := b.Append(context.Background(), testPacket("told", false)); !errors.Is(err, ErrDiskFull) {
				t.Fatalf("append while the disk is full: %v, want ErrDiskFull", err)
			}
			if recs, _ := b.Peek(10); len(recs) != 1 || recs[0].Seq != s2 {
				t.Fatalf("acked record delivered again while its deletion is pending: %v", seqsOf(recs))
			}
			fail.Store(false)
			s3 := mustAppend(t, b, testPacket("three", false))
			want := []string{"two", "three"}
			if d == Interval {
				want = []string{"two", "held", "three"}
			}
			testtool.WaitFor(t, 10*time.Second, "recovery", func() bool { return b.Len() == len(want) })
			if got := devices(t, all(t, b)); !slices.Equal(got, want) || s3 <= s2 || (d == Interval && held <= s2) {
				t.Fatalf("after recovery: %v (seqs %d %d %d)", got, s2, held, s3)
			}
			if st := b.Stats(); st.LostUncommitted != 0 {
				t.Fatalf("%d appends lost", st.LostUncommitted)
			}
		})
	}
}

func TestCorruptRecordIsSkippedAndCounted(t *testing.T) {
	b, path := newT(t, Options{})
	for _, id := range []string{"keep-1", "FLIPME", "keep-2"} {
		mustAppend(t, b, testPacket(id, false))
	}
	b.Close()
	flipAll(t, path, []byte(`"FLIPME"`), 3)
	logs := &testtool.SyncBuffer{}
	b = openT(t, path, Options{Logger: logTo(logs)})
	recs, err := b.Next(10)
	if err != nil {
		t.Fatal(err)
	}
	if got := devices(t, recs); !slices.Equal(got, []string{"keep-1", "keep-2"}) {
		t.Fatalf("Next: %v", got)
	}
	testtool.WaitFor(t, 10*time.Second, "corrupt record deleted", func() bool { return b.Stats().Corrupt == 1 })
	if b.Len() != 2 || !logged(logs, "ERROR", "CRC") {
		t.Fatalf("Len %d; log:\n%s", b.Len(), logs)
	}
}

// flipAll flips the byte at offset off within every copy of marker in the
// file (stale copies in freed pages included).
func flipAll(t testing.TB, path string, marker []byte, off int) {
	t.Helper()
	data, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	n := 0
	for i := 0; ; {
		j := bytes.Index(data[i:], marker)
		if j < 0 {
			break
		}
		data[i+j+off] ^= 0x20
		i += j + len(marker)
		n++
	}
	if n == 0 {
		t.Fatalf("%q not in %s", marker, path)
	}
	if err := os.WriteFile(path, data, 0o600); err != nil {
		t.Fatal(err)
	}
}

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
	if recs, _ := b.Next(len(ps)); len(recs) != len(ps) {
		t.Fatalf("Next leased %d of %d", len(recs), len(ps))
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
	recs, _ := b.Next(100000)
	if !slices.Equal(seqsOf(recs), appended) {
		t.Fatalf("Next after compaction returned %d records, want the %d new ones", len(recs), len(appended))
	}
	if v, err := b.Aux("model"); err != nil || string(v) != "weights" {
		t.Fatalf("aux after compaction: %q, %v", v, err)
	}
	t.Logf("compaction: %d → %d bytes, %d appends meanwhile", before, after, len(appended))
	if _, err := os.Stat(path + compactSuffix); !errors.Is(err, os.ErrNotExist) {
		t.Fatalf("compaction left %s behind", path+compactSuffix)
	}
}

func fileSize(t testing.TB, path string) int64 {
	t.Helper()
	fi, err := os.Stat(path)
	if err != nil {
		t.Fatal(err)
	}
	return fi.Size()
}

// recordSizeOf is what a packet like p counts against MaxBytes (while
// seqs have one or two digits).
func recordSizeOf(t testing.TB, p *packet.Packet) int64 {
	t.Helper()
	return int64(keySize + headerSize + len(wantJSON(p, 10, "01234567", 0)))
}

// devices returns the DeviceIds of recs.
func devices(t testing.TB, recs []Record) []string {
	t.Helper()
	s := make([]string, len(recs))
	for i, r := range recs {
		s[i] = deviceOf(t, r)
	}
	return s
}

// ids2 returns prefix+"%02d" for i in [from, to).
func ids2(prefix string, from, to int) []string {
	var s []string
	for i := from; i < to; i++ {
		s = append(s, fmt.Sprintf("%s%02d", prefix, i))
	}
	return s
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
			// Next in small pieces, past leased records, agrees.
			var next []uint64
			for {
				recs, err := b.Next(100)
				if err != nil {
					t.Fatal(err)
				}
				if len(recs) == 0 {
					break
				}
				next = append(next, seqsOf(recs)...)
			}
			if !slices.Equal(next, want) {
				t.Fatalf("Next: %d records, want %d in delivery order", len(next), len(want))
			}
		})
	}
}

func TestWriterPanicIsContained(t *testing.T) {
	var boom atomic.Bool
	path := filepath.Join(t.TempDir(), "buffer.db")
	b, err := Open(path, Options{Logger: quietLogger(), failCommit: func() error {
		if boom.Load() {
			panic("page 42: unexpected flags") // as bbolt does on a bad page
		}
		return nil
	}})
	if err != nil {
		t.Fatal(err)
	}
	good := mustAppend(t, b, testPacket("good", false))
	boom.Store(true)
	if _, err := b.Append(context.Background(), testPacket("boom", false)); !errors.Is(err, ErrFatal) {
		t.Fatalf("append when bbolt panics: %v, want ErrFatal", err)
	}
	for name, err := range map[string]error{
		"Append": second(b.Append(context.Background(), testPacket("after", false))),
		"Ack":    b.Ack(good),
		"Next":   second(b.Next(1)),
	} {
		if !errors.Is(err, ErrFatal) {
			t.Errorf("%s after the panic: %v, want ErrFatal", name, err)
		}
	}
	done := make(chan error)
	go func() { done <- b.Close() }()
	select {
	case <-done:
	case <-time.After(5 * time.Second):
		t.Fatal("Close hangs after a panic in bbolt")
	}
	// The next process checks the file and finds the durable record.
	b = openT(t, path, Options{})
	if got := seqsOf(all(t, b)); !slices.Equal(got, []uint64{good}) {
		t.Fatalf("after restart: %v", got)
	}
}

// TestAux checks the aux bucket: absent, set, replaced, kept across a
// reopen without the file being taken for a damaged one, and bounded.
func TestAux(t *testing.T) {
	for _, d := range []Durability{Always, Interval} {
		t.Run(d.String(), func(t *testing.T) {
			path := filepath.Join(t.TempDir(), "buffer.db")
			b, err := Open(path, Options{Durability: d, Logger: quietLogger()})
			if err != nil {
				t.Fatal(err)
			}
			if v, err := b.Aux("irlb.model"); err != nil || v != nil {
				t.Fatalf("Aux before any PutAux = %q, %v; want nil, nil", v, err)
			}
			mustAppend(t, b, testPacket("a", false))
			for _, v := range []string{"first", "second"} {
				if err := b.PutAux("irlb.model", []byte(v)); err != nil {
					t.Fatal(err)
				}
			}
			if err := b.PutAux("big", make([]byte, MaxAuxSize+1)); err == nil {
				t.Error("PutAux took a value over MaxAuxSize")
			}
			if err := b.Close(); err != nil {
				t.Fatal(err)
			}
			mustBeSound(t, path)
			b = openT(t, path, Options{Durability: d})
			if st := b.Stats(); st.Salvages != 0 || b.Len() != 1 {
				t.Fatalf("reopen: %d salvages, %d records; want 0 and 1", st.Salvages, b.Len())
			}
			if v, err := b.Aux("irlb.model"); err != nil || string(v) != "second" {
				t.Fatalf("Aux after reopen = %q, %v; want \"second\"", v, err)
			}
		})
	}
}

// TestAppendAllRefusedClearsSeq: packets an append refuses come back with
// Seq 0 and no Epoch, even when they arrived with others.
func TestAppendAllRefusedClearsSeq(t *testing.T) {
	path := filepath.Join(t.TempDir(), "buffer.db")
	b, err := Open(path, Options{Logger: quietLogger()})
	if err != nil {
		t.Fatal(err)
	}
	if err := b.Close(); err != nil {
		t.Fatal(err)
	}
	p := testPacket("late", false)
	p.Seq, p.Epoch = 77, "stale"
	if err := b.AppendAll(context.Background(), p); err == nil {
		t.Fatal("AppendAll on a closed buffer succeeded")
	}
	if p.Seq != 0 || p.Epoch != "" {
		t.Fatalf("refused packet came back with seq %d, epoch %q", p.Seq, p.Epoch)
	}
}
