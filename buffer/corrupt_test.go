package buffer

import (
	"bytes"
	"errors"
	"fmt"
	"math/rand/v2"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"
	"time"

	bolt "go.etcd.io/bbolt"

	"fieldlink/internal/testtool"
)

func TestOpenEmptyFile(t *testing.T) {
	path := filepath.Join(t.TempDir(), "buffer.db")
	if err := os.WriteFile(path, nil, 0o600); err != nil {
		t.Fatal(err)
	}
	logs := &testtool.SyncBuffer{}
	b := openT(t, path, Options{Logger: logTo(logs)})
	if b.Len() != 0 || len(b.Epoch()) != 8 || !logged(logs, "WARN", "empty") {
		t.Fatalf("Len %d, epoch %q; log:\n%s", b.Len(), b.Epoch(), logs)
	}
	if seq := mustAppend(t, b, testPacket("a", false)); seq != 1 {
		t.Fatalf("seq %d", seq)
	}
}

func TestOpenNotABuffer(t *testing.T) {
	dir := t.TempDir()
	foreign := filepath.Join(dir, "foreign.db")
	db, err := bolt.Open(foreign, 0o600, nil)
	if err != nil {
		t.Fatal(err)
	}
	if err := db.Update(func(tx *bolt.Tx) error {
		bk, err := tx.CreateBucket([]byte("widgets"))
		if err != nil {
			return err
		}
		return bk.Put([]byte("k"), []byte("v"))
	}); err != nil {
		t.Fatal(err)
	}
	db.Close()
	for name, content := range map[string][]byte{
		"text":    bytes.Repeat([]byte("this is not a database\n"), 1000),
		"zeros":   make([]byte, 64<<10),
		"short":   []byte("x"),
		"foreign": mustRead(t, foreign),
	} {
		t.Run(name, func(t *testing.T) {
			path := filepath.Join(t.TempDir(), "buffer.db")
			if err := os.WriteFile(path, content, 0o600); err != nil {
				t.Fatal(err)
			}
			logs := &testtool.SyncBuffer{}
			b := openT(t, path, Options{Logger: logTo(logs)})
			st := b.Stats()
			if b.Len() != 0 || st.Salvages != 1 || !logged(logs, "ERROR", "moved aside") {
				t.Fatalf("Len %d, salvages %d; log:\n%s", b.Len(), st.Salvages, logs)
			}
			moved := asides(t, path)
			if len(moved) != 1 || !bytes.Equal(mustRead(t, moved[0]), content) {
				t.Fatalf("the corrupt file was not kept aside as it was: %v", moved)
			}
			mustAppend(t, b, testPacket("a", false))
		})
	}
}

func TestOpenTruncated(t *testing.T) {
	fx, _ := makeFixture(t, 3000, false)
	orig := mustRead(t, fx.path)
	rng := rand.New(rand.NewPCG(1, uint64(time.Now().UnixNano())))
	cuts := 12
	if longMode() {
		cuts = 200
	}
	offsets := []int{0, 100, 4096, 4096 + 100, 8192, len(orig) - 1}
	for range cuts {
		offsets = append(offsets, rng.IntN(len(orig)))
	}
	for _, off := range offsets {
		t.Run(fmt.Sprint(off), func(t *testing.T) {
			path := fx.write(t, orig[:off])
			res, _ := scanRecords(bytes.NewReader(orig[:off]), int64(off), func(k, v []byte) error { return nil })
			b := openT(t, path, Options{})
			recs := fx.verify(t, b)
			st := b.Stats()
			if off == 0 {
				// An empty file is a new buffer.
				return
			}
			if b.Epoch() == fx.epoch {
				// Cut in the slack at the end: nothing lost, no salvage.
				if len(recs) != len(fx.live) || st.Salvages != 0 {
					t.Fatalf("same epoch but %d of %d records, %d salvages", len(recs), len(fx.live), st.Salvages)
				}
				return
			}
			if st.Salvages != 1 || len(asides(t, path)) != 1 {
				t.Fatalf("new epoch but salvages %d, asides %v", st.Salvages, asides(t, path))
			}
			if res.states > 0 {
				// The low watermark survived: acked records stay acked.
				for _, r := range recs {
					if r.Seq <= fx.acked {
						t.Fatalf("acked record %d came back", r.Seq)
					}
				}
			}
			t.Logf("cut at %d of %d: %d of %d live records salvaged, %d lost", off, len(orig), len(recs), len(fx.live), st.SalvageLost)
		})
	}
}

func TestOpenOneBadMetaPage(t *testing.T) {
	for _, which := range []string{"newest", "older"} {
		t.Run(which, func(t *testing.T) {
			// Copy the file while the buffer is open and idle, as a power
			// cut would leave it: the newest meta page is then the last
			// append's commit.
			fx, b := makeFixture(t, 500, true)
			var last []uint64
			for i := range 5 {
				p := testPacket(fmt.Sprintf("last-%d", i), i == 2)
				last = append(last, mustAppend(t, b, p))
				fx.data[p.Seq] = wantJSON(p, p.Seq, fx.epoch, 0)
				fx.live[p.Seq] = true
			}
			path := fx.copyTo(t)
			b.Close()

			data := mustRead(t, path)
			newest, older := metaOffsets(t, data)
			off := newest
			if which == "older" {
				off = older
			}
			data[off+pageHeaderSize+48] ^= 0xFF // txid: the checksum fails
			if err := os.WriteFile(path, data, 0o600); err != nil {
				t.Fatal(err)
			}
			logs := &testtool.SyncBuffer{}
			b = openT(t, path, Options{Logger: logTo(logs)})
			recs := fx.verify(t, b)
			if b.Epoch() != fx.epoch || b.Stats().Salvages != 0 {
				t.Fatalf("one bad meta page: epoch %s → %s, salvages %d", fx.epoch, b.Epoch(), b.Stats().Salvages)
			}
			if len(recs) != len(fx.live) {
				t.Fatalf("%d records, want %d", len(recs), len(fx.live))
			}
			// The last transaction's records are there, whichever meta
			// page went bad.
			if got := seqsOf(recs); !containsAll(got, last) {
				t.Fatalf("the last transaction's records %v are missing", last)
			}
			if which == "older" {
				return // bbolt opened the newest meta page: nothing to log
			}
			if !logged(logs, "WARN", "meta page") {
				t.Fatalf("not logged:\n%s", logs)
			}
		})
	}
}

func TestOpenBothMetaPagesBad(t *testing.T) {
	fx, _ := makeFixture(t, 500, false)
	path := fx.bothMetaBad(t)
	b := openT(t, path, Options{})
	recs := fx.verify(t, b)
	// The data pages are intact: every live record is salvaged, and the
	// acked ones stay acked.
	if b.Epoch() == fx.epoch || len(recs) != len(fx.live) || b.Stats().SalvageLost != 0 {
		t.Fatalf("epoch %s (was %s), %d of %d records, lost %d", b.Epoch(), fx.epoch, len(recs), len(fx.live), b.Stats().SalvageLost)
	}
}

func TestOpenBadPageHeader(t *testing.T) {
	fx, _ := makeFixture(t, 2000, false)
	orig := mustRead(t, fx.path)
	leaves := leafPages(t, orig)
	if len(leaves) < 3 {
		t.Fatalf("only %d leaf pages", len(leaves))
	}
	for _, tc := range []struct {
		name string
		at   int // within the page header
		val  byte
	}{
		{"flags", 8, branchPageFlag},
		{"count", 10, 0xFF},
		{"id", 0, 0x55},
		{"elem-pos", pageHeaderSize + 4, 0xF0},
	} {
		t.Run(tc.name, func(t *testing.T) {
			data := slices.Clone(orig)
			page := leaves[len(leaves)/2]
			data[page+tc.at] = tc.val
			path := fx.write(t, data)
			logs := &testtool.SyncBuffer{}
			b := openT(t, path, Options{Logger: logTo(logs)})
			recs := fx.verify(t, b)
			st := b.Stats()
			if st.Salvages != 1 || b.Epoch() == fx.epoch || !logged(logs, "ERROR", "salvage done") {
				t.Fatalf("salvages %d, epoch %s; log:\n%s", st.Salvages, b.Epoch(), logs)
			}
			if len(recs)+int(st.SalvageLost) < len(fx.live) || len(recs) < len(fx.live)/2 {
				t.Fatalf("%d records salvaged, %d counted lost, of %d", len(recs), st.SalvageLost, len(fx.live))
			}
			t.Logf("%d of %d records salvaged, %d counted lost", len(recs), len(fx.live), st.SalvageLost)
		})
	}
}

func TestOpenRandomFlips(t *testing.T) {
	fx, _ := makeFixture(t, 1500, false)
	orig := mustRead(t, fx.path)
	rng := rand.New(rand.NewPCG(2, uint64(time.Now().UnixNano())))
	runs := 15
	if longMode() {
		runs = 300
	}
	for i := range runs {
		data := slices.Clone(orig)
		var flipped []int
		for range 1 + rng.IntN(8) {
			off := rng.IntN(len(data))
			data[off] ^= byte(1 + rng.IntN(255))
			flipped = append(flipped, off)
		}
		t.Run(fmt.Sprint(i), func(t *testing.T) {
			path := fx.write(t, data)
			b := openT(t, path, Options{})
			fx.verify(t, b) // never garbage, never a crash
			if _, err := b.Lease(1 << 20); err != nil {
				t.Fatalf("flipped %v: Lease: %v", flipped, err)
			}
		})
	}
}

func TestOpenLocked(t *testing.T) {
	path := filepath.Join(t.TempDir(), "buffer.db")
	b := openT(t, path, Options{})
	mustAppend(t, b, testPacket("a", false))
	// flock locks an open file description: a second Open in the same
	// process conflicts like another process would.
	start := time.Now()
	_, err := Open(path, Options{Logger: quietLogger()})
	if !errors.Is(err, ErrLocked) || !strings.Contains(err.Error(), path) ||
		!strings.Contains(err.Error(), "in use by another gateway process?") {
		t.Fatalf("Open of a locked file: %v", err)
	}
	// One-sided: Open must wait for the lock before giving up; how much
	// longer it takes on a loaded machine is not the test's business.
	if d := time.Since(start); d < lockTimeout/2 {
		t.Fatalf("gave up after %v, without waiting for the lock", d)
	}
	if len(asides(t, path)) != 0 || b.Len() != 1 {
		t.Fatal("a locked file was treated as corrupt")
	}
	b.Close()
	// A plain bbolt handle holds the same lock.
	db, err := bolt.Open(path, 0o600, nil)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := Open(path, Options{Logger: quietLogger()}); !errors.Is(err, ErrLocked) {
		t.Fatalf("Open while bbolt holds the file: %v", err)
	}
	db.Close()
	b = openT(t, path, Options{})
	if b.Len() != 1 {
		t.Fatalf("Len %d", b.Len())
	}
}

// TestBoltOpenFaultContained hands bbolt, without the page check, a file
// whose freelist page lies past the end of the file. bbolt may fault reading
// it through its mapping, refuse the file, or open it without touching the
// missing pages; none may crash the process, and each must end in a salvage:
// a fault comes back as errCorrupt, a refusal is one that Open salvages, and
// a file opened anyway fails bbolt's check (contained). Open itself then
// moves the file aside and starts afresh.
func TestBoltOpenFaultContained(t *testing.T) {
	fx, _ := makeFixture(t, 2000, false)
	data := mustRead(t, fx.path)
	m, _ := parseMeta(data)
	if m.freelist == noFreelist || m.freelist < 3 {
		t.Fatalf("the fixture's freelist is at page %d: the test needs one past the meta pages", m.freelist)
	}
	path := filepath.Join(t.TempDir(), "buffer.db")
	cut := int(m.freelist) * int(m.pageSize)
	if err := os.WriteFile(path, data[:cut], 0o600); err != nil {
		t.Fatal(err)
	}
	f, _, err := lockFile(path, time.Second)
	if err != nil {
		t.Fatal(err)
	}
	db, err := boltOpen(path, f, &bolt.Options{OpenFile: func(string, int, os.FileMode) (*os.File, error) { return f, nil }})
	switch {
	case err == nil:
		cerr := boltCheck(db)
		db.Close()
		if !errors.Is(cerr, errCorrupt) {
			t.Fatalf("bbolt opened the cut file, and its check says %v, want errCorrupt", cerr)
		}
	case errors.Is(err, errCorrupt):
		// The fault, contained.
	case boltRefused(err):
		// bbolt's own refusal.
	default:
		t.Fatalf("boltOpen of a cut file: %v: neither contained nor a refusal that Open salvages", err)
	}
	f.Close()
	b := openT(t, path, Options{})
	if st := b.Stats(); st.Salvages != 1 || len(asides(t, path)) != 1 || b.Epoch() == fx.epoch {
		t.Fatalf("Open of the cut file: %d salvages, asides %v, epoch %s (was %s)", st.Salvages, asides(t, path), b.Epoch(), fx.epoch)
	}
}

func TestKeepsOnlyRecentAsides(t *testing.T) {
	path := filepath.Join(t.TempDir(), "buffer.db")
	for i := range 5 {
		if err := os.WriteFile(path, []byte("garbage"), 0o600); err != nil {
			t.Fatal(err)
		}
		b, err := Open(path, Options{Logger: quietLogger()})
		if err != nil {
			t.Fatal(err)
		}
		b.Close()
		if got := len(asides(t, path)); got != min(i+1, keepAside) {
			t.Fatalf("after %d salvages, %d files aside", i+1, got)
		}
	}
}
