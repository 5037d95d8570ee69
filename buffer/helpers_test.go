package buffer

import (
	"bytes"
	"context"
	"fmt"
	"io"
	"log/slog"
	"os"
	"path/filepath"
	"runtime"
	"strings"
	"sync/atomic"
	"syscall"
	"testing"
	"time"

	bolt "go.etcd.io/bbolt"

	"fieldlink/internal/testtool"
	"fieldlink/packet"
)

// longMode reports whether the long versions of the slow tests run.
func longMode() bool { return os.Getenv("FIELDLINK_LONG") == "1" }

// logTo logs at debug level into w, for tests that check that a loss was
// logged loudly.
func logTo(w io.Writer) *slog.Logger {
	return slog.New(slog.NewTextHandler(w, &slog.HandlerOptions{Level: slog.LevelDebug}))
}

// quietLogger drops everything.
func quietLogger() *slog.Logger { return slog.New(slog.NewTextHandler(io.Discard, nil)) }

// testPacket returns a small packet whose DeviceID names it uniquely.
func testPacket(id string, alarm bool) *packet.Packet {
	p := &packet.Packet{
		At:        time.Date(2026, 11, 29, 8, 0, 0, 0, time.UTC),
		SiteID:    "001",
		DataType:  "Gas",
		GatewayID: "gw-01",
		DeviceID:  id,
		Fields: []packet.Field{
			{Name: "CH4", Value: packet.Float(0.4, 2)},
			{Name: "CO", Value: packet.Int(3)},
		},
	}
	if alarm {
		p.Fields[0].Value = packet.Float(1.2, 2)
		p.AlarmFields = []string{"CH4"}
	}
	return p
}

// wantJSON is the JSON that the buffer should store for p under seq.
func wantJSON(p *packet.Packet, seq uint64, epoch string, style packet.ValueStyle) []byte {
	q := *p
	q.Seq, q.Epoch = seq, epoch
	return q.AppendJSON(nil, style)
}

// openT opens a buffer at path for the test, and closes it and checks the
// file, page by page and with bbolt's check, when the test ends.
func openT(t testing.TB, path string, opt Options) *Buffer {
	t.Helper()
	if opt.Logger == nil {
		opt.Logger = quietLogger()
	}
	b, err := Open(path, opt)
	if err != nil {
		t.Fatalf("Open: %v", err)
	}
	t.Cleanup(func() {
		if err := b.Close(); err != nil {
			t.Errorf("Close: %v", err)
		}
		mustBeSound(t, path)
	})
	return b
}

// newT opens a buffer in a new temporary directory.
func newT(t testing.TB, opt Options) (*Buffer, string) {
	t.Helper()
	path := filepath.Join(t.TempDir(), "buffer.db")
	return openT(t, path, opt), path
}

// mustBeSound checks a closed buffer file with the raw checker and bbolt's.
func mustBeSound(t testing.TB, path string) {
	t.Helper()
	f, err := os.Open(path)
	if err != nil {
		t.Errorf("check %s: %v", path, err)
		return
	}
	defer f.Close()
	fi, _ := f.Stat()
	rep, err := check(f, fi.Size())
	if err != nil {
		t.Errorf("check %s: %v", path, err)
		return
	}
	if rep.badMetas != 0 || rep.schemaError() != nil {
		t.Errorf("check %s: bad metas %d, schema %v", path, rep.badMetas, rep.schemaError())
	}
	db, err := bolt.Open(path, 0o600, &bolt.Options{ReadOnly: true, Timeout: time.Second})
	if err != nil {
		t.Errorf("bbolt open %s: %v", path, err)
		return
	}
	defer db.Close()
	if err := boltCheck(db); err != nil {
		t.Errorf("bbolt check %s: %v", path, err)
	}
}

// mustAppend appends p or fails the test.
func mustAppend(t testing.TB, b *Buffer, p *packet.Packet) uint64 {
	t.Helper()
	seq, err := b.Append(context.Background(), p)
	if err != nil {
		t.Fatalf("Append(%s): %v", p.DeviceID, err)
	}
	return seq
}

// all returns every record in delivery order.
func all(t testing.TB, b *Buffer) []Record {
	t.Helper()
	var recs []Record
	if err := b.Each(func(r Record) error { recs = append(recs, r); return nil }); err != nil {
		t.Fatalf("Each: %v", err)
	}
	return recs
}

// seqsOf returns the seqs of recs.
func seqsOf(recs []Record) []uint64 {
	s := make([]uint64, len(recs))
	for i, r := range recs {
		s[i] = r.Seq
	}
	return s
}

// deviceOf returns the DeviceId inside a record's JSON.
func deviceOf(t testing.TB, r Record) string {
	t.Helper()
	p, err := packet.Decode(r.Data)
	if err != nil {
		t.Fatalf("record %d: %v", r.Seq, err)
	}
	return p.DeviceID
}

// noLeak fails the test if goroutines started during it are still running
// once it ends.
func noLeak(t testing.TB) {
	before := runtime.NumGoroutine()
	t.Cleanup(func() {
		if !testtool.Eventually(5*time.Second, 5*time.Millisecond, func() bool { return runtime.NumGoroutine() <= before }) {
			buf := make([]byte, 1<<20)
			n := runtime.Stack(buf, true)
			t.Errorf("goroutines: %d before, %d after:\n%s", before, runtime.NumGoroutine(), buf[:n])
		}
	})
}

// ids returns "prefix-0" … "prefix-(n-1)".
func ids(prefix string, n int) []string {
	s := make([]string, n)
	for i := range s {
		s[i] = fmt.Sprintf("%s-%d", prefix, i)
	}
	return s
}

// logged reports whether the log has a line at level with msg in it.
func logged(l fmt.Stringer, level, msg string) bool {
	for _, line := range strings.Split(l.String(), "\n") {
		if strings.Contains(line, "level="+level) && strings.Contains(line, msg) {
			return true
		}
	}
	return false
}

// containsAll reports whether have holds every seq of want (want may hold
// seqs acked meanwhile: the caller's business).
func containsAll(have, want []uint64) bool {
	set := make(map[uint64]bool, len(have))
	for _, s := range have {
		set[s] = true
	}
	for _, s := range want {
		if !set[s] {
			return false
		}
	}
	return true
}

// failWhen is a failCommit hook: every commit fails with err while fail is
// set.
func failWhen(fail *atomic.Bool, err error) func() error {
	return func() error {
		if fail.Load() {
			return err
		}
		return nil
	}
}

// errENOSPC is a commit failing as on a full disk.
var errENOSPC = fmt.Errorf("write: %w", syscall.ENOSPC)

// fullAfterTwo opens a buffer of durability d (Interval committing every
// 10ms), appends "one" and "two" as s1 and s2, waits for their commit and
// then sets fail: every commit fails as on a full disk until the test
// clears it.
func fullAfterTwo(t testing.TB, d Durability) (b *Buffer, fail *atomic.Bool, s1, s2 uint64) {
	t.Helper()
	fail = new(atomic.Bool)
	b, _ = newT(t, Options{Durability: d, SyncEvery: 10 * time.Millisecond, failCommit: failWhen(fail, errENOSPC)})
	s1 = mustAppend(t, b, testPacket("one", false))
	s2 = mustAppend(t, b, testPacket("two", false))
	testtool.WaitFor(t, 10*time.Second, "commit", func() bool { return b.Len() == 2 })
	fail.Store(true)
	return b, fail, s1, s2
}

// eioAt is an fsync of the file at path failing with EIO.
func eioAt(path string) error {
	return &os.PathError{Op: "fdatasync", Path: path, Err: syscall.EIO}
}

func second[T any](_ T, err error) error { return err }

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
