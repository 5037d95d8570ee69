package buffer

import (
	"errors"
	"fmt"
	"maps"
	"math/rand/v2"
	"os"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"sync/atomic"
	"testing"
	"time"
)

// scanAll returns ScanAux(prefix) as a map, failing on keys out of order.
func scanAll(t testing.TB, b *Buffer, prefix string) (map[string]string, []string) {
	t.Helper()
	m := map[string]string{}
	var order []string
	err := b.ScanAux(prefix, func(k string, v []byte) error {
		if len(order) > 0 && k <= order[len(order)-1] {
			return fmt.Errorf("key %q after %q", k, order[len(order)-1])
		}
		if !strings.HasPrefix(k, prefix) {
			return fmt.Errorf("key %q lacks the prefix %q", k, prefix)
		}
		order = append(order, k)
		m[k] = string(v)
		return nil
	})
	if err != nil {
		t.Fatalf("ScanAux(%q): %v", prefix, err)
	}
	return m, order
}

// TestUpdateAux checks batched sets and deletes, the prefix scan in key
// order across its chunks, the refusals, and that all of it is kept across
// a reopen.
func TestUpdateAux(t *testing.T) {
	for _, d := range []Durability{Always, Interval} {
		t.Run(d.String(), func(t *testing.T) {
			path := filepath.Join(t.TempDir(), "buffer.db")
			b := openT(t, path, Options{Durability: d, SyncEvery: 10 * time.Millisecond})
			if m, _ := scanAll(t, b, ""); len(m) != 0 {
				t.Fatalf("ScanAux of a new file: %v", m)
			}
			if err := b.DeleteAux("nothing-yet"); err != nil {
				t.Fatalf("DeleteAux before the bucket exists: %v", err)
			}
			// More keys than one scan chunk, put in random order, with
			// neighbours on both sides of the prefix.
			n := 2*auxScanChunk + 7
			want := map[string]string{}
			put := map[string][]byte{"a": []byte("before"), "id/": []byte("exactly the prefix"), "id0": []byte("after")}
			for _, i := range rand.Perm(n) {
				k := fmt.Sprintf("id/%05d", i)
				put[k] = []byte(strconv.Itoa(i))
				want[k] = strconv.Itoa(i)
			}
			want["id/"] = "exactly the prefix"
			if err := b.UpdateAux(put, nil); err != nil {
				t.Fatal(err)
			}
			got, order := scanAll(t, b, "id/")
			if !maps.Equal(got, want) || !slices.IsSorted(order) {
				t.Fatalf("ScanAux: %d keys, want %d, sorted %v", len(got), len(want), slices.IsSorted(order))
			}
			// One update deletes some keys and sets others.
			var del []string
			for i := 0; i < n; i += 3 {
				k := fmt.Sprintf("id/%05d", i)
				del = append(del, k)
				delete(want, k)
			}
			want["id/new"] = "new"
			want["id/00001"] = "replaced"
			if err := b.UpdateAux(map[string][]byte{"id/new": []byte("new"), "id/00001": []byte("replaced")}, del); err != nil {
				t.Fatal(err)
			}
			if got, _ := scanAll(t, b, "id/"); !maps.Equal(got, want) {
				t.Fatalf("after the update: %d keys, want %d", len(got), len(want))
			}
			// fn's error stops the scan and comes back.
			stop, calls := errors.New("stop"), 0
			if err := b.ScanAux("id/", func(string, []byte) error { calls++; return stop }); err != stop || calls != 1 {
				t.Fatalf("ScanAux with a failing fn: %v after %d calls", err, calls)
			}
			for name, err := range map[string]error{
				"set and delete":   b.UpdateAux(map[string][]byte{"x": nil}, []string{"x"}),
				"empty key":        b.UpdateAux(map[string][]byte{"": []byte("v")}, nil),
				"empty delete key": b.DeleteAux(""),
				"long key":         b.PutAux(strings.Repeat("k", 40000), nil),
				"big value":        b.UpdateAux(map[string][]byte{"big": make([]byte, MaxAuxSize+1)}, nil),
			} {
				if err == nil {
					t.Errorf("UpdateAux took %s", name)
				}
			}
			if v, _ := b.Aux("x"); v != nil {
				t.Fatalf("a refused update was applied: %q", v)
			}
			if err := b.Close(); err != nil {
				t.Fatal(err)
			}
			mustBeSound(t, path)
			b = openT(t, path, Options{Durability: d})
			if got, _ := scanAll(t, b, "id/"); !maps.Equal(got, want) {
				t.Fatalf("after reopen: %d keys, want %d", len(got), len(want))
			}
			if v, _ := b.Aux("a"); string(v) != "before" {
				t.Fatalf("Aux(a) after reopen = %q", v)
			}
		})
	}
}

// TestUpdateAuxFailedCommit: an update whose commit fails returns the error
// and leaves nothing behind, and the next one goes through.
func TestUpdateAuxFailedCommit(t *testing.T) {
	var fail atomic.Bool
	b, _ := newT(t, Options{failCommit: failWhen(&fail, errENOSPC)})
	if err := b.PutAux("keep", []byte("1")); err != nil {
		t.Fatal(err)
	}
	fail.Store(true)
	if err := b.UpdateAux(map[string][]byte{"new": []byte("2")}, []string{"keep"}); !errors.Is(err, ErrDiskFull) {
		t.Fatalf("UpdateAux on a full disk: %v, want ErrDiskFull", err)
	}
	fail.Store(false)
	if got, _ := scanAll(t, b, ""); !maps.Equal(got, map[string]string{"keep": "1"}) {
		t.Fatalf("after the failed update: %v", got)
	}
	if err := b.UpdateAux(map[string][]byte{"new": []byte("2")}, []string{"keep"}); err != nil {
		t.Fatal(err)
	}
	if got, _ := scanAll(t, b, ""); !maps.Equal(got, map[string]string{"new": "2"}) {
		t.Fatalf("after the update: %v", got)
	}
}

// auxCrashChild is the child process of TestAuxCrash: update after update,
// each sets "n" to i, adds k/i and deletes k/(i-3), and prints "u i" once
// it returned.
func auxCrashChild(path string, say func(string, ...any)) {
	b, err := Open(path, Options{Logger: quietLogger()})
	if err != nil {
		say("e open: %v\n", err)
		os.Exit(3)
	}
	v, err := b.Aux("n")
	if err != nil {
		say("e aux: %v\n", err)
		os.Exit(3)
	}
	i, _ := strconv.Atoi(string(v))
	for {
		i++
		put := map[string][]byte{"n": []byte(strconv.Itoa(i)), auxCrashKey(i): []byte(strconv.Itoa(i))}
		if err := b.UpdateAux(put, []string{auxCrashKey(i - 3)}); err != nil {
			say("e update: %v\n", err)
			return
		}
		say("u %d\n", i)
	}
}

func auxCrashKey(i int) string { return fmt.Sprintf("k/%09d", i) }

// TestAuxCrash kills a child that updates the aux bucket with SIGKILL at
// random moments: after each kill every update that returned is in the
// file, and each update is there whole or not at all.
func TestAuxCrash(t *testing.T) {
	if os.Getenv(crashEnvPath) != "" {
		t.Skip("in the child")
	}
	cycles := 20
	if longMode() {
		cycles = 200
	}
	path := filepath.Join(t.TempDir(), "buffer.db")
	rng := rand.New(rand.NewPCG(5, uint64(time.Now().UnixNano())))
	last := 0
	for c := range cycles {
		for _, line := range runAndKill(t, path, "aux", c, time.Duration(rng.IntN(30))*time.Millisecond) {
			f := strings.Fields(line)
			switch {
			case len(f) == 2 && f[0] == "u":
				i, err := strconv.Atoi(f[1])
				if err != nil || i <= last {
					t.Fatalf("cycle %d: line %q after update %d", c, line, last)
				}
				last = i
			default:
				t.Fatalf("cycle %d: the child said %q", c, line)
			}
		}
		b, err := Open(path, Options{Logger: quietLogger()})
		if err != nil {
			t.Fatalf("cycle %d: reopen after kill: %v", c, err)
		}
		v, _ := b.Aux("n")
		n, _ := strconv.Atoi(string(v))
		if n < last {
			t.Fatalf("cycle %d: update %d returned, the file holds %d", c, last, n)
		}
		last = n
		want := map[string]string{"n": strconv.Itoa(n)}
		for i := max(n-2, 1); i <= n; i++ {
			want[auxCrashKey(i)] = strconv.Itoa(i)
		}
		if got, _ := scanAll(t, b, ""); !maps.Equal(got, want) {
			t.Fatalf("cycle %d: after update %d the file holds %v, want %v", c, n, got, want)
		}
		if st := b.Stats(); st.Salvages != 0 {
			t.Fatalf("cycle %d: a kill corrupted the file", c)
		}
		if err := b.Close(); err != nil {
			t.Fatal(err)
		}
	}
	mustBeSound(t, path)
	t.Logf("%d kills, %d updates", cycles, last)
}

// TestAuxSalvage: a salvage does not keep the aux bucket (its values
// carry no checksum), as documented; the salvaged file takes new ones.
func TestAuxSalvage(t *testing.T) {
	path := filepath.Join(t.TempDir(), "buffer.db")
	b, err := Open(path, Options{Logger: quietLogger()})
	if err != nil {
		t.Fatal(err)
	}
	mustAppend(t, b, testPacket("kept", false))
	if err := b.PutAux("model", []byte("weights")); err != nil {
		t.Fatal(err)
	}
	if err := b.Close(); err != nil {
		t.Fatal(err)
	}
	data := mustRead(t, path)
	m, _ := parseMeta(data)
	clear(data[:2*m.pageSize]) // both meta pages: salvage
	if err := os.WriteFile(path, data, 0o600); err != nil {
		t.Fatal(err)
	}
	b = openT(t, path, Options{})
	if st := b.Stats(); st.Salvages != 1 || b.Len() != 1 {
		t.Fatalf("%d salvages, %d records; want 1 and 1", st.Salvages, b.Len())
	}
	if v, err := b.Aux("model"); v != nil || err != nil {
		t.Fatalf("aux after salvage: %q, %v; want none", v, err)
	}
	if err := b.PutAux("model", []byte("again")); err != nil {
		t.Fatal(err)
	}
}

// TestCompactionCountsAux: the aux bucket is live data. A file that is
// mostly aux (the downlink's audit log) is not bloated, and compacting it
// would copy it all for nothing, again every compactBackoff.
func TestCompactionCountsAux(t *testing.T) {
	type check struct{ size, live int64 }
	checks := make(chan check, 100)
	b, _ := newT(t, Options{CompactMinSize: 64 << 10, compactCheck: func(size, live int64) {
		select {
		case checks <- check{size, live}:
		default:
		}
	}})
	var auxBytes int64
	for i := range 8 {
		v := make([]byte, 128<<10)
		for j := range v {
			v[j] = byte(i + j) // incompressible enough; bbolt does not compress anyway
		}
		if err := b.PutAux(fmt.Sprintf("audit/%d", i), v); err != nil {
			t.Fatal(err)
		}
		auxBytes += int64(len(v))
	}
	seq := mustAppend(t, b, testPacket("a", false))
	for len(checks) > 0 {
		<-checks
	}
	if err := b.Ack(seq); err != nil { // records deleted: the writer weighs a compaction
		t.Fatal(err)
	}
	var c check
	select {
	case c = <-checks:
	case <-time.After(10 * time.Second):
		t.Fatal("the writer did not weigh a compaction after the ack")
	}
	if c.live < auxBytes {
		t.Fatalf("compaction weighed a file of %d bytes against %d live bytes; the aux bucket alone holds %d", c.size, c.live, auxBytes)
	}
	if st := b.Stats(); st.Compactions != 0 {
		t.Fatalf("%d compactions of a file that is mostly aux", st.Compactions)
	}
}

// TestAuxCommitsAtOnce: with Interval durability, an aux update does not
// wait for the next group commit (SyncEvery): its caller (the downlink,
// before a write to a device) waits on it. Appends queued with it are
// committed with it.
func TestAuxCommitsAtOnce(t *testing.T) {
	b, path := newT(t, Options{Durability: Interval, SyncEvery: time.Hour})
	done := make(chan error, 2)
	go func() { done <- b.PutAux("first", []byte("1")) }() // the first of a batch
	select {
	case err := <-done:
		if err != nil {
			t.Fatal(err)
		}
	case <-time.After(10 * time.Second):
		t.Fatal("an aux update waited for the group commit (SyncEvery is an hour)")
	}
	seq := mustAppend(t, b, testPacket("a", false)) // opens a batch that waits an hour
	go func() { done <- b.PutAux("second", []byte("2")) }()
	select {
	case err := <-done:
		if err != nil {
			t.Fatal(err)
		}
	case <-time.After(10 * time.Second):
		t.Fatal("an aux update behind an append waited for the group commit")
	}
	if err := b.Close(); err != nil {
		t.Fatal(err)
	}
	b = openT(t, path, Options{})
	if v, _ := b.Aux("second"); string(v) != "2" || b.Len() != 1 {
		t.Fatalf("after reopen: aux %q, %d records (seq %d)", v, b.Len(), seq)
	}
}

// TestAux checks the aux bucket: absent, set, replaced, kept across a
// reopen without the file being taken for a damaged one, and bounded.
func TestAux(t *testing.T) {
	for _, d := range []Durability{Always, Interval} {
		t.Run(d.String(), func(t *testing.T) {
			path := filepath.Join(t.TempDir(), "buffer.db")
			b, err := Open(path, Options{Durability: d, Logger: quietLogger()})
			if err != nil {
				t.Fatal(err)
			}
			if v, err := b.Aux("irlb.model"); err != nil || v != nil {
				t.Fatalf("Aux before any PutAux = %q, %v; want nil, nil", v, err)
			}
			mustAppend(t, b, testPacket("a", false))
			for _, v := range []string{"first", "second"} {
				if err := b.PutAux("irlb.model", []byte(v)); err != nil {
					t.Fatal(err)
				}
			}
			if err := b.PutAux("big", make([]byte, MaxAuxSize+1)); err == nil {
				t.Error("PutAux took a value over MaxAuxSize")
			}
			if err := b.Close(); err != nil {
				t.Fatal(err)
			}
			mustBeSound(t, path)
			b = openT(t, path, Options{Durability: d})
			if st := b.Stats(); st.Salvages != 0 || b.Len() != 1 {
				t.Fatalf("reopen: %d salvages, %d records; want 0 and 1", st.Salvages, b.Len())
			}
			if v, err := b.Aux("irlb.model"); err != nil || string(v) != "second" {
				t.Fatalf("Aux after reopen = %q, %v; want \"second\"", v, err)
			}
		})
	}
}
