package buffer

import (
	"encoding/binary"
	"os"
	"path/filepath"
	"slices"
	"testing"
	"time"

	bolt "go.etcd.io/bbolt"
)

// seenFormats opens the closed buffer file at path read-only and returns
// the formats it holds: bbolt's meta version, the top-level buckets, and
// byte 4 of the state, of every record and of every dead letter.
func seenFormats(t *testing.T, path string) Formats {
	t.Helper()
	raw, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	var f Formats
	f.Bolt = []int{int(binary.LittleEndian.Uint32(raw[pageHeaderSize+4:]))}
	db, err := bolt.Open(path, 0o600, &bolt.Options{ReadOnly: true, Timeout: time.Second})
	if err != nil {
		t.Fatal(err)
	}
	defer db.Close()
	add := func(s *[]int, v []byte) {
		if !slices.Contains(*s, int(v[4])) {
			*s = append(*s, int(v[4]))
		}
	}
	err = db.View(func(tx *bolt.Tx) error {
		return tx.ForEach(func(name []byte, b *bolt.Bucket) error {
			f.Buckets = append(f.Buckets, string(name))
			switch string(name) {
			case string(bucketMeta):
				add(&f.State, b.Get(keyState))
			case string(bucketAlarm), string(bucketNormal):
				return b.ForEach(func(_, v []byte) error { add(&f.Record, v); return nil })
			case string(bucketDead):
				return b.ForEach(func(_, v []byte) error { add(&f.Dead, v); return nil })
			}
			return nil
		})
	})
	if err != nil {
		t.Fatal(err)
	}
	return f
}

// TestWriteFormatsListWhatIsWritten writes files with every kind of content
// the buffer has (records and alarms; then dead letters and aux values) and
// checks that each format found in them is one WriteFormats lists, and one
// ReadFormats lists: a format changed without its list would let an
// updater install a version whose file the previous one cannot read.
func TestWriteFormatsListWhatIsWritten(t *testing.T) {
	if missing := ReadFormats().Unreadable(WriteFormats()); len(missing) > 0 {
		t.Errorf("this version writes what it does not read: %v", missing)
	}
	path := filepath.Join(t.TempDir(), "buf.db")
	seen := Formats{}
	step := func(what string, fn func(b *Buffer)) {
		b, err := Open(path, Options{Logger: quietLogger()})
		if err != nil {
			t.Fatal(err)
		}
		fn(b)
		if err := b.Close(); err != nil {
			t.Fatal(err)
		}
		f := seenFormats(t, path)
		if missing := WriteFormats().Unreadable(f); len(missing) > 0 {
			t.Errorf("%s: the file holds %v, which WriteFormats does not list", what, missing)
		}
		seen.Bolt = append(seen.Bolt, f.Bolt...)
		seen.Buckets = append(seen.Buckets, f.Buckets...)
		seen.State = append(seen.State, f.State...)
		seen.Record = append(seen.Record, f.Record...)
		seen.Dead = append(seen.Dead, f.Dead...)
	}
	var seqs []uint64
	step("records", func(b *Buffer) {
		for i, id := range ids("f", 4) {
			seqs = append(seqs, mustAppend(t, b, testPacket(id, i == 0)))
		}
	})
	step("dead letters and aux", func(b *Buffer) {
		if err := b.DeadLetter("HTTP 400", seqs[1]); err != nil {
			t.Fatal(err)
		}
		if err := b.PutAux("k", []byte("v")); err != nil {
			t.Fatal(err)
		}
	})
	// Each kind of content was there to be seen: state format 1 (no dead
	// letter yet) and 2, records, dead letters, every bucket.
	for _, c := range []struct {
		what string
		got  []int
		want int
	}{{"state", seen.State, 1}, {"state", seen.State, stateFormat}, {"record", seen.Record, recordFormat}, {"dead-letter", seen.Dead, deadFormat}} {
		if !slices.Contains(c.got, c.want) {
			t.Errorf("no %s format %d seen in the files (saw %v): the test no longer covers it", c.what, c.want, c.got)
		}
	}
	for _, name := range WriteFormats().Buckets {
		if !slices.Contains(seen.Buckets, name) {
			t.Errorf("bucket %q never seen in the files: the test no longer covers it", name)
		}
	}
}

func TestUnreadable(t *testing.T) {
	old := ReadFormats()
	newer := WriteFormats()
	newer.Record = append(newer.Record, 2)
	newer.Buckets = append(newer.Buckets, "index")
	newer.Bolt = append(newer.Bolt, 3)
	got := old.Unreadable(newer)
	want := []string{"bbolt file format 3", `bucket "index"`, "record format 2"}
	if !slices.Equal(got, want) {
		t.Errorf("Unreadable = %q, want %q", got, want)
	}
	if got := newer.Unreadable(old); len(got) != 0 {
		t.Errorf("a reader of more formats than written: Unreadable = %q, want none", got)
	}
}
