package buffer

import (
	"bytes"
	"context"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"fieldlink/packet"
)

// fixture is a buffer file with known contents, closed.
type fixture struct {
	path  string
	epoch string
	data  map[uint64][]byte // every record ever stored: seq → JSON
	live  map[uint64]bool   // the records not acked
	acked uint64            // every seq ≤ acked was acked (in order)
}

// makeFixture fills a buffer with n records (every seventh an alarm) in
// batches, acks the oldest quarter, and closes it (cleanly unless open is
// set, in which case the buffer is returned still open).
func makeFixture(t testing.TB, n int, open bool) (*fixture, *Buffer) {
	t.Helper()
	fx := &fixture{path: filepath.Join(t.TempDir(), "buffer.db"), data: map[uint64][]byte{}, live: map[uint64]bool{}}
	b, err := Open(fx.path, Options{Logger: quietLogger()})
	if err != nil {
		t.Fatal(err)
	}
	fx.epoch = b.Epoch()
	var ps []*packet.Packet
	for i := range n {
		p := testPacket(fmt.Sprintf("fx-%05d", i), i%7 == 3)
		p.Fields = append(p.Fields, packet.Field{Name: "Note", Value: packet.String(strings.Repeat("n", i%50))})
		ps = append(ps, p)
	}
	for i := 0; i < n; i += 100 {
		batch := ps[i:min(i+100, n)]
		if err := b.AppendAll(context.Background(), batch...); err != nil {
			t.Fatal(err)
		}
		for _, p := range batch {
			fx.data[p.Seq] = wantJSON(p, p.Seq, fx.epoch, 0)
			fx.live[p.Seq] = true
		}
	}
	var ack []uint64
	for _, p := range ps[:n/4] {
		ack = append(ack, p.Seq)
		delete(fx.live, p.Seq)
		fx.acked = p.Seq
	}
	if err := b.Ack(ack...); err != nil {
		t.Fatal(err)
	}
	if open {
		return fx, b
	}
	if err := b.Close(); err != nil {
		t.Fatal(err)
	}
	return fx, nil
}

// copyTo copies the fixture's file to a new path.
func (fx *fixture) copyTo(t testing.TB) string {
	t.Helper()
	return fx.write(t, mustRead(t, fx.path))
}

// bothMetaBad copies the fixture's file to a new path with both meta
// pages bad: the newest one's magic and the older one's checksum broken.
func (fx *fixture) bothMetaBad(t testing.TB) string {
	t.Helper()
	data := mustRead(t, fx.path)
	newest, older := metaOffsets(t, data)
	data[newest+pageHeaderSize+1] ^= 0xFF // magic
	data[older+pageHeaderSize+60] ^= 0xFF // checksum
	return fx.write(t, data)
}

// write writes data as a buffer file in a new directory, with the
// fixture's seq floor file next to it, and returns its path.
func (fx *fixture) write(t testing.TB, data []byte) string {
	t.Helper()
	path := filepath.Join(t.TempDir(), "buffer.db")
	if err := os.WriteFile(path, data, 0o600); err != nil {
		t.Fatal(err)
	}
	if floor, err := os.ReadFile(fx.path + floorSuffix); err == nil {
		if err := os.WriteFile(path+floorSuffix, floor, 0o600); err != nil {
			t.Fatal(err)
		}
	}
	return path
}

// verify checks that every record of b is one the fixture stored, byte for
// byte, once, and that new seqs go above every old one. It returns the
// records.
func (fx *fixture) verify(t testing.TB, b *Buffer) []Record {
	t.Helper()
	recs := all(t, b)
	seen := map[uint64]bool{}
	for _, r := range recs {
		want, ok := fx.data[r.Seq]
		if !ok || !bytes.Equal(r.Data, want) {
			t.Fatalf("record %d is not one that was stored: %q", r.Seq, r.Data)
		}
		if seen[r.Seq] {
			t.Fatalf("record %d twice", r.Seq)
		}
		seen[r.Seq] = true
	}
	var maxSeq uint64
	for s := range fx.data {
		maxSeq = max(maxSeq, s)
	}
	if seq := mustAppend(t, b, testPacket("after", false)); seq <= maxSeq {
		t.Fatalf("new seq %d, old file went up to %d", seq, maxSeq)
	}
	return recs
}

// asides returns the corrupt files moved aside next to path.
func asides(t testing.TB, path string) []string {
	names, err := filepath.Glob(path + ".corrupt-*")
	if err != nil {
		t.Fatal(err)
	}
	return names
}

func mustRead(t testing.TB, path string) []byte {
	t.Helper()
	data, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	return data
}

// metaOffsets returns the offsets of the two meta pages, newest first.
func metaOffsets(t testing.TB, data []byte) (newest, older int) {
	t.Helper()
	m0, ok0 := parseMeta(data)
	ps := int(m0.pageSize)
	m1, ok1 := parseMeta(data[ps:])
	if !ok0 || !ok1 {
		t.Fatal("fixture has a bad meta page")
	}
	if m1.txid > m0.txid {
		return ps, 0
	}
	return 0, ps
}

// leafPages returns the offsets of the leaf pages of the file that hold
// records.
func leafPages(t testing.TB, data []byte) []int {
	t.Helper()
	m, _ := parseMeta(data)
	ps := int(m.pageSize)
	var offs []int
	for off := 2 * ps; off+ps <= len(data) && uint64(off/ps) < m.pgid; off += ps {
		p := rawPage(data[off : off+ps])
		if p.id() != uint64(off/ps) || p.flags() != leafPageFlag || p.count() < 2 {
			continue
		}
		if _, k, _, err := p.leaf(0); err == nil && len(k) == keySize {
			offs = append(offs, off)
		}
	}
	return offs
}
