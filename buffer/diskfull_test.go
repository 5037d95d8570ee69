//go:build linux

package buffer

import (
	"context"
	"errors"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"syscall"
	"testing"
	"time"

	"fieldlink/internal/testtool"
	"fieldlink/packet"
)

// smallFS mounts a small filesystem for the test and returns its
// directory, or "" with the reason it could not. kind is "ext4" (a loop-
// mounted image: real block allocation, as on the SD card) or "tmpfs".
func smallFS(t *testing.T, kind string) (dir, why string) {
	t.Helper()
	if os.Geteuid() != 0 {
		return "", "not root"
	}
	base := t.TempDir()
	dir = filepath.Join(base, "mnt")
	if err := os.Mkdir(dir, 0o755); err != nil {
		t.Fatal(err)
	}
	switch kind {
	case "tmpfs":
		if err := syscall.Mount("tmpfs", dir, "tmpfs", 0, "size=4m"); err != nil {
			return "", "mount tmpfs: " + err.Error()
		}
	case "ext4":
		mkfs := testtool.Require(t, "mkfs.ext4", "e2fsprogs")
		img := filepath.Join(base, "fs.img")
		if err := os.WriteFile(img, nil, 0o600); err != nil {
			t.Fatal(err)
		}
		if err := os.Truncate(img, 16<<20); err != nil {
			t.Fatal(err)
		}
		if out, err := exec.Command(mkfs, "-q", "-F", "-m", "0", img).CombinedOutput(); err != nil {
			return "", fmt.Sprintf("mkfs.ext4: %v: %s", err, out)
		}
		if out, err := exec.Command("mount", "-o", "loop", img, dir).CombinedOutput(); err != nil {
			return "", fmt.Sprintf("mount -o loop: %v: %s", err, out)
		}
	}
	t.Cleanup(func() {
		if err := syscall.Unmount(dir, 0); err != nil {
			_ = syscall.Unmount(dir, syscall.MNT_DETACH)
		}
	})
	return dir, ""
}

// fill writes a ballast file into dir until the filesystem is full, then
// gives back about leave bytes, and returns the ballast's path.
func fill(t *testing.T, dir string, leave int64) string {
	t.Helper()
	path := filepath.Join(dir, "ballast")
	f, err := os.Create(path)
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	chunk := make([]byte, 64<<10)
	var n int64
	for {
		w, err := f.Write(chunk)
		n += int64(w)
		if err != nil {
			if !errors.Is(err, syscall.ENOSPC) {
				t.Fatal(err)
			}
			break
		}
	}
	if err := f.Truncate(max(n-leave, 0)); err != nil {
		t.Fatal(err)
	}
	if err := f.Sync(); err != nil {
		t.Fatal(err)
	}
	return path
}

func TestDiskFull(t *testing.T) {
	for _, kind := range []string{"ext4", "tmpfs"} {
		t.Run(kind, func(t *testing.T) {
			dir, why := smallFS(t, kind)
			if dir == "" {
				// Root and loop devices are capabilities the test needs:
				// a skip here must fail under CI.
				testtool.Missing(t, fmt.Sprintf("a small %s to fill (%s; the maxsize subtest covers the logic)", kind, why), "mount")
			}
			path := filepath.Join(dir, "buffer.db")
			b := openT(t, path, Options{})
			for i := range 50 {
				mustAppend(t, b, testPacket(fmt.Sprint("before-", i), i%5 == 0))
			}
			ballast := fill(t, dir, 256<<10)
			durable := diskFullCycle(t, b, func() { os.Remove(ballast) })
			b.Close()
			b = openT(t, path, Options{})
			if got := seqsOf(all(t, b)); !containsAll(got, durable) {
				t.Fatalf("after reopen: %d records, %d durable ones expected", len(got), len(durable))
			}
		})
	}
	t.Run("maxsize", func(t *testing.T) {
		// Where mounts are refused: bbolt's MaxSize makes the same error
		// path run (ErrMaxSizeReached instead of ENOSPC). Freeing space
		// here means acking records, so that their pages can be reused.
		b, path := newT(t, Options{maxFileSize: 1 << 20})
		durable := diskFullCycle(t, b, func() {
			recs := all(t, b)
			if err := b.Ack(seqsOf(recs[:len(recs)*3/4])...); err != nil {
				t.Fatal(err)
			}
		})
		_ = durable
		b.Close()
		b = openT(t, path, Options{})
		if b.Len() == 0 {
			t.Fatal("empty after reopen")
		}
	})
	t.Run("maxsize/acklater", func(t *testing.T) {
		// The gateway's way: the acks ride on the next commit, which is
		// an append's. On a full file they commit first, alone, in the
		// reserve, and the append then fits in the pages they freed.
		b, _ := newT(t, Options{maxFileSize: 1 << 20})
		diskFullCycle(t, b, func() {
			recs := all(t, b)
			if err := b.AckLater(seqsOf(recs[:len(recs)*3/4])...); err != nil {
				t.Fatal(err)
			}
			if _, err := b.Append(context.Background(), testPacket("after-acks", false)); err != nil {
				t.Fatalf("the append after the acks: %v", err)
			}
		})
	})
}

// diskFullCycle appends until the disk is full, checks that nothing durable
// was lost and that the buffer keeps answering, frees space with free, and
// checks that appends succeed again without a reopen. It returns the seqs
// that are durable.
func diskFullCycle(t *testing.T, b *Buffer, free func()) []uint64 {
	t.Helper()
	ctx := context.Background()
	durable := seqsOf(all(t, b))
	var full error
	for i := 0; full == nil; i++ {
		if i > 100000 {
			t.Fatal("the disk never filled up")
		}
		ps := make([]*packet.Packet, 20)
		for j := range ps {
			ps[j] = testPacket(fmt.Sprintf("fill-%d-%d", i, j), j == 0)
			ps[j].Fields = append(ps[j].Fields, packet.Field{Name: "Pad", Value: packet.String(string(make([]byte, 200)))})
			// A number from elsewhere (the gateway's stamper gives one):
			// a refused packet must not come back with it.
			ps[j].Seq, ps[j].Epoch = 1<<40+uint64(j), "stale"
		}
		if err := b.AppendAll(ctx, ps...); err != nil {
			full = err
			for _, p := range ps {
				if p.Seq != 0 || p.Epoch != "" {
					t.Fatalf("a packet of a failed batch came back with seq %d, epoch %q", p.Seq, p.Epoch)
				}
			}
			break
		}
		for _, p := range ps {
			durable = append(durable, p.Seq)
		}
	}
	if !errors.Is(full, ErrDiskFull) {
		t.Fatalf("append on a full disk: %v, want ErrDiskFull", full)
	}
	// A single small packet may still fit in a free page: fill those too,
	// until appends fail again and again.
	for fails, i := 0, 0; fails < 5; i++ {
		if i > 10000 {
			t.Fatal("single appends never fail")
		}
		seq, err := b.Append(ctx, testPacket(fmt.Sprint("single-", i), false))
		switch {
		case err == nil:
			durable = append(durable, seq)
			fails = 0
		case errors.Is(err, ErrDiskFull):
			fails++
		default:
			t.Fatalf("append while full: %v", err)
		}
	}
	t.Logf("full after %d records: %v", len(durable), full)
	if got := seqsOf(all(t, b)); !containsAll(got, durable) || b.Len() != len(durable) {
		t.Fatalf("while full: %d records, Len %d, %d durable", len(got), b.Len(), len(durable))
	}
	if recs, err := b.Lease(10); err != nil || len(recs) != 10 {
		t.Fatalf("Lease while full: %d, %v", len(recs), err)
	}
	if b.Stats().LastError == "" {
		t.Fatal("the error is not in Stats")
	}

	free()
	// Recovers by itself: the next batch commits.
	var seq uint64
	testtool.WaitFor(t, 10*time.Second, "appends to succeed again", func() bool {
		s, err := b.Append(ctx, testPacket("after", false))
		seq = s
		return err == nil
	})
	if got := seqsOf(all(t, b)); !slices.Contains(got, seq) {
		t.Fatalf("the append after recovery is missing")
	}
	return append(durable, seq)
}
