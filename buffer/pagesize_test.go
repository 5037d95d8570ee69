package buffer

import (
	"context"
	"fmt"
	"os"
	"path/filepath"
	"slices"
	"testing"
	"time"

	"fieldlink/internal/testtool"
	"fieldlink/packet"
)

// filePageSize returns the page size in the meta page of the file at path.
func filePageSize(t testing.TB, path string) int {
	t.Helper()
	m, ok := parseMeta(mustRead(t, path))
	if !ok {
		t.Fatal("first meta page unreadable")
	}
	return int(m.pageSize)
}

// sorted returns seqs in increasing order (alarms come first).
func sorted(seqs []uint64) []uint64 {
	slices.Sort(seqs)
	return seqs
}

// TestNewFilePageSize checks that a new file takes the small pages that
// keep the bytes written per commit down.
func TestNewFilePageSize(t *testing.T) {
	b, path := newT(t, Options{})
	mustAppend(t, b, testPacket("one", false))
	if err := b.Close(); err != nil {
		t.Fatal(err)
	}
	if got := filePageSize(t, path); got != pageSize {
		t.Fatalf("page size %d, want %d", got, pageSize)
	}
}

// TestOldPageSize checks that a file written with bbolt's default 4 KiB
// pages still opens with its page size, is salvaged when both meta pages
// are bad, and is compacted into the new page size, its records intact.
func TestOldPageSize(t *testing.T) {
	path := filepath.Join(t.TempDir(), "buffer.db")
	b := openT(t, path, Options{pageSize: 4096})
	var ps []*packet.Packet
	for i := range 2000 {
		ps = append(ps, testPacket(fmt.Sprintf("old-%04d", i), i%50 == 0))
	}
	for i := 0; i < len(ps); i += 500 {
		if err := b.AppendAll(context.Background(), ps[i:i+500]...); err != nil {
			t.Fatal(err)
		}
	}
	var acked []uint64
	for _, p := range ps[:1900] {
		acked = append(acked, p.Seq)
	}
	if err := b.Ack(acked...); err != nil {
		t.Fatal(err)
	}
	if err := b.Close(); err != nil {
		t.Fatal(err)
	}
	if got := filePageSize(t, path); got != 4096 {
		t.Fatalf("the old file has pages of %d bytes, want 4096", got)
	}
	want := seqsOf(nil)
	for _, p := range ps[1900:] {
		want = append(want, p.Seq)
	}

	t.Run("open", func(t *testing.T) {
		dir := t.TempDir()
		cp := filepath.Join(dir, "buffer.db")
		if err := os.WriteFile(cp, mustRead(t, path), 0o600); err != nil {
			t.Fatal(err)
		}
		b := openT(t, cp, Options{CompactRatio: -1})
		seq := mustAppend(t, b, testPacket("new", false))
		if got := sorted(seqsOf(all(t, b))); !slices.Equal(got, append(slices.Clone(want), seq)) || b.Stats().Salvages != 0 {
			t.Fatalf("records %v, salvages %d", got, b.Stats().Salvages)
		}
		if err := b.Close(); err != nil {
			t.Fatal(err)
		}
		if got := filePageSize(t, cp); got != 4096 {
			t.Fatalf("page size %d after a reopen, want the file's 4096", got)
		}
	})

	t.Run("salvage", func(t *testing.T) {
		data := mustRead(t, path)
		clear(data[:2*4096]) // both meta pages
		cp := filepath.Join(t.TempDir(), "buffer.db")
		if err := os.WriteFile(cp, data, 0o600); err != nil {
			t.Fatal(err)
		}
		b := openT(t, cp, Options{CompactRatio: -1})
		if got := seqsOf(all(t, b)); b.Stats().Salvages != 1 || !containsAll(got, want) {
			t.Fatalf("salvages %d, %d records, want %d", b.Stats().Salvages, len(got), len(want))
		}
	})

	t.Run("compact", func(t *testing.T) {
		cp := filepath.Join(t.TempDir(), "buffer.db")
		if err := os.WriteFile(cp, mustRead(t, path), 0o600); err != nil {
			t.Fatal(err)
		}
		b := openT(t, cp, Options{CompactMinSize: 64 << 10})
		testtool.WaitFor(t, 10*time.Second, "compaction", func() bool { return b.Stats().Compactions == 1 })
		if got := sorted(seqsOf(all(t, b))); !slices.Equal(got, want) {
			t.Fatalf("%d records after compaction, want %d", len(got), len(want))
		}
		if err := b.Close(); err != nil {
			t.Fatal(err)
		}
		if got := filePageSize(t, cp); got != pageSize {
			t.Fatalf("page size %d after compaction, want %d", got, pageSize)
		}
	})
}
