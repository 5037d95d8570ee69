package buffer

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"slices"
	"strings"
	"testing"
	"time"

	bolt "go.etcd.io/bbolt"

	"fieldlink/internal/testtool"
	"fieldlink/packet"
)

// deadRec is a dead letter as EachDead returns it.
type deadRec struct {
	Record
	reason string
}

// allDead returns every dead letter, oldest first.
func allDead(t testing.TB, b *Buffer) []deadRec {
	t.Helper()
	var recs []deadRec
	if err := b.EachDead(func(r Record, reason string) error {
		recs = append(recs, deadRec{r, reason})
		return nil
	}); err != nil {
		t.Fatalf("EachDead: %v", err)
	}
	return recs
}

func deadSeqs(recs []deadRec) []uint64 {
	s := make([]uint64, len(recs))
	for i, r := range recs {
		s[i] = r.Seq
	}
	return s
}

// bySeq returns the record seq of recs.
func bySeq(t testing.TB, recs []Record, seq uint64) Record {
	t.Helper()
	for _, r := range recs {
		if r.Seq == seq {
			return r
		}
	}
	t.Fatalf("no record %d", seq)
	return Record{}
}

func sameRecord(a, b Record) bool {
	return a.Seq == b.Seq && a.Alarm == b.Alarm && a.At.Equal(b.At) && bytes.Equal(a.Data, b.Data)
}

func TestDeadLetter(t *testing.T) {
	b, path := newT(t, Options{})
	var s []uint64
	for i, id := range ids("d", 5) {
		s = append(s, mustAppend(t, b, testPacket(id, i == 1)))
	}
	before := all(t, b)
	size := func(seq uint64) int64 {
		r := bySeq(t, before, seq)
		return int64(keySize + headerSize + len(r.Data))
	}
	total := b.Bytes()

	// The alarm d-1 and d-0 are leased; d-3 is not.
	if leased, err := b.Lease(2); err != nil || !slices.Equal(seqsOf(leased), []uint64{s[1], s[0]}) {
		t.Fatalf("Lease: %v, %v", seqsOf(leased), err)
	}
	if err := b.DeadLetter("HTTP 400 Bad Request", s[3], s[4]+100, s[3]); err != nil {
		t.Fatal(err)
	}
	if err := b.DeadLetter("HTTP 403 Forbidden: ünïcode", s[1]); err != nil {
		t.Fatal(err)
	}
	if b.Len() != 3 || b.Bytes() != total-size(s[1])-size(s[3]) {
		t.Fatalf("Len %d Bytes %d; want 3, %d", b.Len(), b.Bytes(), total-size(s[1])-size(s[3]))
	}
	if recs, _ := b.Peek(10); !slices.Equal(seqsOf(recs), []uint64{s[2], s[4]}) {
		t.Fatalf("Peek: %v", seqsOf(recs))
	}
	b.Release(s[1], s[0]) // s[1] is no longer leased: ignored
	if recs, _ := b.Lease(10); !slices.Equal(seqsOf(recs), []uint64{s[0], s[2], s[4]}) {
		t.Fatalf("Lease: %v", seqsOf(recs))
	}

	check := func(when string) {
		t.Helper()
		dead := allDead(t, b)
		if !slices.Equal(deadSeqs(dead), []uint64{s[3], s[1]}) { // in the order they died
			t.Fatalf("%s: EachDead: %v", when, deadSeqs(dead))
		}
		for i, reason := range []string{"HTTP 400 Bad Request", "HTTP 403 Forbidden: ünïcode"} {
			if !sameRecord(dead[i].Record, bySeq(t, before, dead[i].Seq)) || dead[i].reason != reason {
				t.Fatalf("%s: dead letter %d: %+v %q", when, i, dead[i].Record, dead[i].reason)
			}
		}
		if got := seqsOf(all(t, b)); !slices.Equal(got, []uint64{s[0], s[2], s[4]}) {
			t.Fatalf("%s: Each: %v", when, got)
		}
		st := b.Stats()
		wantBytes := int64(2*(deadKeySize+deadHeaderSize)+len("HTTP 400 Bad Request")+len("HTTP 403 Forbidden: ünïcode")) +
			size(s[1]) + size(s[3]) - 2*keySize
		if st.DeadLetters != 2 || st.DeadDepth != 2 || st.DeadBytes != wantBytes || st.DeadDropped != 0 {
			t.Fatalf("%s: DeadLetters %d DeadDepth %d DeadBytes %d (want %d) DeadDropped %d",
				when, st.DeadLetters, st.DeadDepth, st.DeadBytes, wantBytes, st.DeadDropped)
		}
		if st.Alarms != 0 || st.Normal != 3 || b.Len() != 3 {
			t.Fatalf("%s: %d alarms, %d normal, Len %d", when, st.Alarms, st.Normal, b.Len())
		}
	}
	check("open")
	if st := b.Stats(); st.Leased != 3 {
		t.Fatalf("Leased %d, want 3", st.Leased)
	}

	// Dead letters are out of reach of Ack and DeadLetter.
	if err := b.Ack(s[1]); err != nil {
		t.Fatal(err)
	}
	if err := b.DeadLetter("again", s[3]); err != nil {
		t.Fatal(err)
	}
	check("after acking them")

	if err := b.Close(); err != nil {
		t.Fatal(err)
	}
	mustBeSound(t, path)
	b = openT(t, path, Options{})
	check("reopened")
	if recs, _ := b.Lease(10); !slices.Equal(seqsOf(recs), []uint64{s[0], s[2], s[4]}) {
		t.Fatalf("Lease after reopen: %v", seqsOf(recs))
	}
	if seq := mustAppend(t, b, testPacket("after", false)); seq <= s[4] {
		t.Fatalf("seq %d reused", seq)
	}
}

func TestDeadLetterReasonIsClipped(t *testing.T) {
	b, _ := newT(t, Options{})
	seq := mustAppend(t, b, testPacket("long", false))
	long := strings.Repeat("x", maxReason-1) + "é" + strings.Repeat("y", 100) // é straddles the cut
	if err := b.DeadLetter(long, seq); err != nil {
		t.Fatal(err)
	}
	dead := allDead(t, b)
	if len(dead) != 1 || dead[0].reason != long[:maxReason-1] {
		t.Fatalf("reason %d bytes: %.20q…", len(dead[0].reason), dead[0].reason)
	}
}

// onDisk returns the format of the closed buffer's state at path, and
// whether it has a dead bucket.
func onDisk(t testing.TB, path string) (format byte, dead bool) {
	t.Helper()
	db, err := bolt.Open(path, 0o600, &bolt.Options{ReadOnly: true, Timeout: time.Second})
	if err != nil {
		t.Fatal(err)
	}
	defer db.Close()
	if err := db.View(func(tx *bolt.Tx) error {
		v := tx.Bucket(bucketMeta).Get(keyState)
		if _, ok := decodeState(v); !ok {
			return errors.New("state does not verify")
		}
		format, dead = v[4], tx.Bucket(bucketDead) != nil
		return nil
	}); err != nil {
		t.Fatal(err)
	}
	return format, dead
}

// A file is written as versions without dead letters wrote it until it
// has one.
func TestDeadLetterInAnOldFile(t *testing.T) {
	b, path := newT(t, Options{})
	var s []uint64
	for _, id := range ids("old", 3) {
		s = append(s, mustAppend(t, b, testPacket(id, false)))
	}
	if err := b.Ack(s[0]); err != nil {
		t.Fatal(err)
	}
	if n, err := b.PurgeDead(); n != 0 || err != nil {
		t.Fatalf("PurgeDead without a dead bucket: %d, %v", n, err)
	}
	if dead := allDead(t, b); len(dead) != 0 {
		t.Fatalf("EachDead without a dead bucket: %v", deadSeqs(dead))
	}
	if err := b.DeadLetter("gone", s[0]); err != nil { // unknown: nothing to move
		t.Fatal(err)
	}
	if err := b.Close(); err != nil {
		t.Fatal(err)
	}
	if format, dead := onDisk(t, path); format != 1 || dead {
		t.Fatalf("without dead letters: state format %d, dead bucket %v; want 1, false", format, dead)
	}

	b = openT(t, path, Options{})
	if st := b.Stats(); st.Salvages != 0 || b.Len() != 2 || st.LastSeq != s[2] || st.DeadDepth != 0 || st.DeadLetters != 0 {
		t.Fatalf("format 1: salvages %d, Len %d, last seq %d, dead %d/%d", st.Salvages, b.Len(), st.LastSeq, st.DeadDepth, st.DeadLetters)
	}
	if err := b.DeadLetter("HTTP 422", s[1]); err != nil {
		t.Fatal(err)
	}
	if err := b.Close(); err != nil {
		t.Fatal(err)
	}
	mustBeSound(t, path)
	if format, dead := onDisk(t, path); format != stateFormat || !dead {
		t.Fatalf("with a dead letter: state format %d, dead bucket %v", format, dead)
	}
	b = openT(t, path, Options{})
	if dead := allDead(t, b); !slices.Equal(deadSeqs(dead), []uint64{s[1]}) || dead[0].reason != "HTTP 422" {
		t.Fatalf("EachDead: %v", dead)
	}
	if st := b.Stats(); st.DeadLetters != 1 || st.DeadDepth != 1 || b.Len() != 1 || st.Salvages != 0 {
		t.Fatalf("DeadLetters %d DeadDepth %d Len %d salvages %d", st.DeadLetters, st.DeadDepth, b.Len(), st.Salvages)
	}
}

func TestDeadLetterBound(t *testing.T) {
	const reason = "HTTP 404"
	p := testPacket("b-0", false)
	one := recordSizeOf(t, p) + deadKeySize - keySize + deadHeaderSize + int64(len(reason))
	for _, c := range []struct {
		name string
		opt  Options
	}{
		{"count", Options{deadMax: 3}},
		{"bytes", Options{deadMaxBytes: 3*one + one/2}},
	} {
		t.Run(c.name, func(t *testing.T) {
			logs := &testtool.SyncBuffer{}
			c.opt.Logger = logTo(logs)
			b, path := newT(t, c.opt)
			for range 9 { // two-digit seqs from here on, as recordSizeOf counts them
				if err := b.Ack(mustAppend(t, b, testPacket("pad", false))); err != nil {
					t.Fatal(err)
				}
			}
			var s []uint64
			for _, id := range ids("b", 8) {
				s = append(s, mustAppend(t, b, testPacket(id, false)))
			}
			for _, seq := range s[:5] {
				if err := b.DeadLetter(reason, seq); err != nil {
					t.Fatal(err)
				}
			}
			if got := deadSeqs(allDead(t, b)); !slices.Equal(got, s[2:5]) {
				t.Fatalf("EachDead: %v, want %v", got, s[2:5])
			}
			// Several at once: the bound holds at every commit.
			if err := b.DeadLetter(reason, s[5:]...); err != nil {
				t.Fatal(err)
			}
			check := func() {
				t.Helper()
				if got := deadSeqs(allDead(t, b)); !slices.Equal(got, s[5:]) {
					t.Fatalf("EachDead: %v, want %v", got, s[5:])
				}
				st := b.Stats()
				if st.DeadLetters != 8 || st.DeadDropped != 5 || st.DeadDepth != 3 || st.DeadBytes != 3*one || b.Len() != 0 {
					t.Fatalf("DeadLetters %d DeadDropped %d DeadDepth %d DeadBytes %d (one %d) Len %d",
						st.DeadLetters, st.DeadDropped, st.DeadDepth, st.DeadBytes, one, b.Len())
				}
			}
			check()
			if !logged(logs, "WARN", "dropped the oldest dead letters") {
				t.Fatalf("drop not logged:\n%s", logs)
			}
			if err := b.Close(); err != nil {
				t.Fatal(err)
			}
			b = openT(t, path, c.opt)
			check()
		})
	}
}

func TestEachDeadPagesAndStops(t *testing.T) {
	b, _ := newT(t, Options{})
	const n = 2*eachChunk + 7
	ps := make([]*packet.Packet, n)
	for i := range ps {
		ps[i] = testPacket(fmt.Sprint("e-", i), i%5 == 0)
	}
	if err := b.AppendAll(context.Background(), ps...); err != nil {
		t.Fatal(err)
	}
	var want []uint64
	for i := n - 1; i >= 0; i-- { // die newest first
		want = append(want, ps[i].Seq)
	}
	for i := 0; i < n; i += 100 {
		if err := b.DeadLetter(fmt.Sprint("batch ", i), want[i:min(i+100, n)]...); err != nil {
			t.Fatal(err)
		}
	}
	dead := allDead(t, b)
	if len(dead) != n || b.Len() != 0 {
		t.Fatalf("%d dead letters, Len %d; want %d, 0", len(dead), b.Len(), n)
	}
	for i := 0; i < n; i += 100 {
		// Batches in the order they died; each sorted by seq.
		if first := want[min(i+100, n)-1]; dead[i].Seq != first || dead[i].reason != fmt.Sprint("batch ", i) {
			t.Fatalf("dead letter %d: %d %q", i, dead[i].Seq, dead[i].reason)
		}
	}
	stop := errors.New("stop")
	calls := 0
	err := b.EachDead(func(Record, string) error {
		if calls++; calls == eachChunk+1 {
			return stop
		}
		return nil
	})
	if !errors.Is(err, stop) || calls != eachChunk+1 {
		t.Fatalf("EachDead: %v after %d calls", err, calls)
	}
}

func TestPurgeDead(t *testing.T) {
	b, path := newT(t, Options{})
	var s []uint64
	for _, id := range ids("p", 5) {
		s = append(s, mustAppend(t, b, testPacket(id, false)))
	}
	if err := b.DeadLetter("no", s[:3]...); err != nil {
		t.Fatal(err)
	}
	// Purge empties the queue, not the dead letters.
	if n, err := b.Purge(); n != 2 || err != nil {
		t.Fatalf("Purge: %d, %v", n, err)
	}
	if st := b.Stats(); st.DeadDepth != 3 || b.Len() != 0 {
		t.Fatalf("after Purge: DeadDepth %d Len %d", st.DeadDepth, b.Len())
	}
	if n, err := b.PurgeDead(); n != 3 || err != nil {
		t.Fatalf("PurgeDead: %d, %v", n, err)
	}
	if st := b.Stats(); st.DeadDepth != 0 || st.DeadBytes != 0 || st.DeadLetters != 3 || len(allDead(t, b)) != 0 {
		t.Fatalf("after PurgeDead: DeadDepth %d DeadBytes %d DeadLetters %d", st.DeadDepth, st.DeadBytes, st.DeadLetters)
	}
	// The bucket stays, and its numbering goes on.
	s6 := mustAppend(t, b, testPacket("p-6", false))
	if err := b.DeadLetter("later", s6); err != nil {
		t.Fatal(err)
	}
	if err := b.Close(); err != nil {
		t.Fatal(err)
	}
	b = openT(t, path, Options{})
	if dead := allDead(t, b); !slices.Equal(deadSeqs(dead), []uint64{s6}) || dead[0].reason != "later" {
		t.Fatalf("EachDead: %v", deadSeqs(dead))
	}
	if st := b.Stats(); st.DeadLetters != 4 || st.DeadDepth != 1 {
		t.Fatalf("DeadLetters %d DeadDepth %d", st.DeadLetters, st.DeadDepth)
	}
}
