package buffer

import (
	"context"
	"errors"
	"fmt"
	"path/filepath"
	"slices"
	"testing"
	"time"

	"fieldlink/internal/testtool"
)

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

func TestPurge(t *testing.T) {
	b, path := newT(t, Options{})
	for _, id := range ids("d", 30) {
		mustAppend(t, b, testPacket(id, id == "d-7"))
	}
	b.Lease(5)
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
			"Lease": second(b.Lease(1)),
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

func TestCorruptRecordIsSkippedAndCounted(t *testing.T) {
	b, path := newT(t, Options{})
	for _, id := range []string{"keep-1", "FLIPME", "keep-2"} {
		mustAppend(t, b, testPacket(id, false))
	}
	b.Close()
	flipAll(t, path, []byte(`"FLIPME"`), 3)
	logs := &testtool.SyncBuffer{}
	b = openT(t, path, Options{Logger: logTo(logs)})
	recs, err := b.Lease(10)
	if err != nil {
		t.Fatal(err)
	}
	if got := devices(t, recs); !slices.Equal(got, []string{"keep-1", "keep-2"}) {
		t.Fatalf("Lease: %v", got)
	}
	testtool.WaitFor(t, 10*time.Second, "corrupt record deleted", func() bool { return b.Stats().Corrupt == 1 })
	if b.Len() != 2 || !logged(logs, "ERROR", "CRC") {
		t.Fatalf("Len %d; log:\n%s", b.Len(), logs)
	}
}
