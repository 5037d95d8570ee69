package buffer

import (
	"errors"
	"path/filepath"
	"slices"
	"sync/atomic"
	"syscall"
	"testing"
	"time"

	"fieldlink/internal/testtool"
)

func TestDeadLetterENOSPCRecovers(t *testing.T) {
	for _, d := range []Durability{Always, Interval} {
		t.Run(d.String(), func(t *testing.T) {
			b, fail, s1, s2 := fullAfterTwo(t, d)
			err := b.DeadLetter("HTTP 400", s1)
			if d == Always && !errors.Is(err, ErrDiskFull) {
				t.Fatalf("DeadLetter on ENOSPC: %v, want ErrDiskFull", err)
			}
			if d == Interval && err != nil {
				t.Fatalf("DeadLetter (interval): %v", err)
			}
			testtool.WaitFor(t, 10*time.Second, "a failed commit", func() bool { return b.Stats().LastError != "" })
			if recs, _ := b.Peek(10); !slices.Equal(seqsOf(recs), []uint64{s2}) {
				t.Fatalf("dead letter delivered while its move is pending: %v", seqsOf(recs))
			}
			b.Release(s1) // what the uplink does when DeadLetter fails: harmless
			if recs, _ := b.Lease(10); !slices.Equal(seqsOf(recs), []uint64{s2}) {
				t.Fatalf("dead letter delivered after Release: %v", seqsOf(recs))
			}
			fail.Store(false)
			if d == Interval {
				// The next transaction takes the move along.
				mustAppend(t, b, testPacket("three", false))
			} // Always: the buffer retries the move by itself, within a second.
			testtool.WaitFor(t, 10*time.Second, "the retried move", func() bool { return b.Stats().DeadDepth == 1 })
			if dead := allDead(t, b); !slices.Equal(deadSeqs(dead), []uint64{s1}) || b.Len() != b.Stats().Normal || b.Stats().DeadLetters != 1 {
				t.Fatalf("after recovery: dead %v, Len %d", deadSeqs(dead), b.Len())
			}
		})
	}
}

func TestDeadLetterEIOIsFatal(t *testing.T) {
	var fail atomic.Bool
	path := filepath.Join(t.TempDir(), "buffer.db")
	b, err := Open(path, Options{Logger: quietLogger(), failCommit: failWhen(&fail, eioAt(path))})
	if err != nil {
		t.Fatal(err)
	}
	s := mustAppend(t, b, testPacket("eio", false))
	fail.Store(true)
	if err := b.DeadLetter("HTTP 400", s); !errors.Is(err, ErrFatal) || !errors.Is(err, syscall.EIO) {
		t.Fatalf("DeadLetter on EIO: %v, want ErrFatal wrapping EIO", err)
	}
	fail.Store(false)
	if err := b.DeadLetter("HTTP 400", s); !errors.Is(err, ErrFatal) {
		t.Fatalf("DeadLetter after EIO: %v, want ErrFatal", err)
	}
	if _, err := b.PurgeDead(); !errors.Is(err, ErrFatal) {
		t.Fatalf("PurgeDead after EIO: %v, want ErrFatal", err)
	}
	b.Close()
	// The move never committed: the record is queued again.
	b = openT(t, path, Options{})
	if got := seqsOf(all(t, b)); !slices.Equal(got, []uint64{s}) || len(allDead(t, b)) != 0 {
		t.Fatalf("after restart: queued %v, dead %v", got, deadSeqs(allDead(t, b)))
	}
}

func TestDeadLetterCorruptIsSkippedAndCounted(t *testing.T) {
	b, path := newT(t, Options{})
	var s []uint64
	for _, id := range []string{"FLIPME", "keep-1", "keep-2"} {
		s = append(s, mustAppend(t, b, testPacket(id, false)))
	}
	if err := b.DeadLetter("bad body", s[0]); err != nil {
		t.Fatal(err)
	}
	if err := b.DeadLetter("bad reason FLIPTHIS", s[1]); err != nil {
		t.Fatal(err)
	}
	if err := b.DeadLetter("good", s[2]); err != nil {
		t.Fatal(err)
	}
	b.Close()
	flipAll(t, path, []byte(`"FLIPME"`), 3)
	flipAll(t, path, []byte(`FLIPTHIS`), 2)
	logs := &testtool.SyncBuffer{}
	b = openT(t, path, Options{Logger: logTo(logs)})
	if dead := allDead(t, b); !slices.Equal(deadSeqs(dead), []uint64{s[2]}) {
		t.Fatalf("EachDead: %v", deadSeqs(dead))
	}
	testtool.WaitFor(t, 10*time.Second, "corrupt dead letters deleted", func() bool { return b.Stats().Corrupt == 2 })
	if st := b.Stats(); st.DeadDepth != 1 || !logged(logs, "ERROR", "CRC") {
		t.Fatalf("DeadDepth %d; log:\n%s", st.DeadDepth, logs)
	}
}

func TestSalvageDropsDeadLetters(t *testing.T) {
	fx, b := makeFixture(t, 500, true)
	// The oldest live record of each queue, and the next few: below the low
	// watermarks once moved, so that stale copies stay deleted.
	var dead []uint64
	alarms, normal := 0, 0
	for seq := fx.acked + 1; alarms < 1 || normal < 5; seq++ {
		switch alarm := isAlarm(t, fx.data[seq]); {
		case !fx.live[seq]:
		case alarm && alarms < 1:
			alarms++
			dead = append(dead, seq)
		case !alarm && normal < 5:
			normal++
			dead = append(dead, seq)
		}
	}
	if err := b.DeadLetter("HTTP 400", dead...); err != nil {
		t.Fatal(err)
	}
	for _, seq := range dead {
		delete(fx.live, seq)
	}
	if err := b.Close(); err != nil {
		t.Fatal(err)
	}
	path := fx.bothMetaBad(t)
	b = openT(t, path, Options{})
	recs := fx.verify(t, b)
	st := b.Stats()
	if st.Salvages != 1 || len(recs) != len(fx.live) || len(allDead(t, b)) != 0 {
		t.Fatalf("salvages %d, %d of %d records, %d dead letters", st.Salvages, len(recs), len(fx.live), len(allDead(t, b)))
	}
	for _, r := range recs {
		if slices.Contains(dead, r.Seq) {
			t.Fatalf("dead letter %d back in the queue", r.Seq)
		}
	}
	if st.DeadLetters != uint64(len(dead)) || st.DeadDropped != uint64(len(dead)) || st.DeadDepth != 0 || st.DeadBytes != 0 {
		t.Fatalf("DeadLetters %d DeadDropped %d DeadDepth %d DeadBytes %d; want %d dropped",
			st.DeadLetters, st.DeadDropped, st.DeadDepth, st.DeadBytes, len(dead))
	}
}
