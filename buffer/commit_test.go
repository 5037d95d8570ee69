package buffer

import (
	"context"
	"errors"
	"fmt"
	"path/filepath"
	"slices"
	"sync"
	"sync/atomic"
	"syscall"
	"testing"
	"time"

	"fieldlink/internal/testtool"
)

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
			b, fail, s1, s2 := fullAfterTwo(t, d)
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
		"Lease":  second(b.Lease(1)),
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
