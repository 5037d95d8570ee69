package buffer

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"path/filepath"
	"testing"
	"time"

	"fieldlink/packet"
)

func TestAppendStoresJSONWithSeqAndEpoch(t *testing.T) {
	for _, style := range []packet.ValueStyle{packet.Strings, packet.Numbers} {
		t.Run(fmt.Sprint(style), func(t *testing.T) {
			b, _ := newT(t, Options{Values: style})
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
				want = append(want, wantJSON(p, seq, b.Epoch(), style))
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

func TestAppendContext(t *testing.T) {
	b, _ := newT(t, Options{})
	ctx, cancel := context.WithCancel(context.Background())
	cancel()
	// Either queued-then-cancelled (not stored) or refused at once.
	if _, err := b.Append(ctx, testPacket("a", false)); !errors.Is(err, context.Canceled) {
		t.Fatalf("Append with a cancelled context: %v", err)
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
