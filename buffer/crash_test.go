package buffer

import (
	"bufio"
	"bytes"
	"context"
	"fmt"
	"math/rand/v2"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"fieldlink/packet"
)

// The crash test runs this test binary again as a child (TestCrashChild)
// that appends as fast as it can, and kills it with SIGKILL at a random
// moment. The child prints a line for every append that returned:
//
//	a <seq> <device>   Append returned seq for the packet of device
//	l <seq>            seq was leased (ack mode): it may be acked
//	e <error>          something failed
const (
	crashEnvPath  = "FIELDLINK_CRASH_CHILD"
	crashEnvMode  = "FIELDLINK_CRASH_MODE"
	crashEnvCycle = "FIELDLINK_CRASH_CYCLE"
)

// TestCrashChild is the child process of TestCrash, not a test of its own.
func TestCrashChild(t *testing.T) {
	path := os.Getenv(crashEnvPath)
	if path == "" {
		t.Skip("the child of TestCrash")
	}
	mode, cycle := os.Getenv(crashEnvMode), os.Getenv(crashEnvCycle)
	opt := Options{Logger: quietLogger()}
	if mode == "ack" {
		// Compact often, so that kills land in compactions too.
		opt.CompactMinSize, opt.CompactRatio = 32<<10, 2
	}
	var mu sync.Mutex
	say := func(format string, args ...any) {
		mu.Lock()
		defer mu.Unlock()
		fmt.Fprintf(os.Stdout, format, args...) // one write(2) per line; os.Stdout is unbuffered
	}
	if mode == "aux" {
		auxCrashChild(path, say)
		select {}
	}
	b, err := Open(path, opt)
	if err != nil {
		say("e open: %v\n", err)
		os.Exit(3)
	}
	ctx := context.Background()
	for g := range 4 {
		go func() {
			for i := 0; ; i++ {
				if mode == "batch" && g == 0 {
					ps := make([]*packet.Packet, 10)
					for j := range ps {
						ps[j] = testPacket(fmt.Sprintf("c%s-g%d-%d-%d", cycle, g, i, j), j == 3)
					}
					if err := b.AppendAll(ctx, ps...); err != nil {
						say("e append: %v\n", err)
						return
					}
					for _, p := range ps {
						say("a %d %s\n", p.Seq, p.DeviceID)
					}
					continue
				}
				dev := fmt.Sprintf("c%s-g%d-%d", cycle, g, i)
				seq, err := b.Append(ctx, testPacket(dev, i%10 == 0))
				if err != nil {
					say("e append: %v\n", err)
					return
				}
				say("a %d %s\n", seq, dev)
			}
		}()
	}
	if mode == "ack" || mode == "later" {
		ack := b.Ack
		if mode == "later" {
			ack = b.AckLater // kills land with deletions waiting for a commit
		}
		go func() {
			for {
				recs, err := b.Lease(20)
				if err != nil {
					say("e next: %v\n", err)
					return
				}
				for _, r := range recs {
					say("l %d\n", r.Seq)
				}
				if err := ack(seqsOf(recs)...); err != nil {
					say("e ack: %v\n", err)
					return
				}
			}
		}()
	}
	select {}
}

func TestCrash(t *testing.T) {
	if os.Getenv(crashEnvPath) != "" {
		t.Skip("in the child")
	}
	cycles := 50
	if longMode() {
		cycles = 500
	}
	path := filepath.Join(t.TempDir(), "buffer.db")
	rng := rand.New(rand.NewPCG(3, uint64(time.Now().UnixNano())))
	leased := map[uint64]bool{} // ever leased by a child: may have been acked
	var maxSeen, appended, kept uint64
	start := time.Now()
	for c := range cycles {
		mode := []string{"append", "batch", "ack", "later"}[c%4]
		lines := runAndKill(t, path, mode, c, time.Duration(rng.IntN(60))*time.Millisecond)

		type print struct {
			seq uint64
			dev string
		}
		var prints []print
		for _, line := range lines {
			f := strings.Fields(line)
			switch {
			case len(f) == 3 && f[0] == "a":
				seq, err := strconv.ParseUint(f[1], 10, 64)
				if err != nil {
					t.Fatalf("cycle %d: bad line %q", c, line)
				}
				prints = append(prints, print{seq, f[2]})
				maxSeen = max(maxSeen, seq)
			case len(f) == 2 && f[0] == "l":
				seq, _ := strconv.ParseUint(f[1], 10, 64)
				leased[seq] = true
			case len(f) > 0 && f[0] == "e":
				t.Fatalf("cycle %d (%s): the child failed: %s", c, mode, line)
			}
		}
		appended += uint64(len(prints))

		// Everything that returned is there, under its seq, once.
		b, err := Open(path, Options{Logger: quietLogger()})
		if err != nil {
			t.Fatalf("cycle %d (%s): reopen after kill: %v", c, mode, err)
		}
		byseq := map[uint64]Record{}
		bydev := map[string]uint64{}
		var prev [2]uint64
		err = b.Each(func(r Record) error {
			q := qNormal
			if r.Alarm {
				q = qAlarm
			}
			if r.Seq <= prev[q] {
				return fmt.Errorf("seq %d after %d in the %s queue", r.Seq, prev[q], queueBuckets[q])
			}
			prev[q] = r.Seq
			if _, dup := byseq[r.Seq]; dup {
				return fmt.Errorf("seq %d in both queues", r.Seq)
			}
			p, err := packet.Decode(r.Data)
			if err != nil || p.Seq != r.Seq || p.Epoch != b.Epoch() {
				return fmt.Errorf("record %d: seq %d epoch %q in its JSON (%v)", r.Seq, p.Seq, p.Epoch, err)
			}
			if other, dup := bydev[p.DeviceID]; dup {
				return fmt.Errorf("packet %s stored twice, as %d and %d", p.DeviceID, other, r.Seq)
			}
			byseq[r.Seq], bydev[p.DeviceID] = r, r.Seq
			return nil
		})
		if err != nil {
			t.Fatalf("cycle %d (%s): %v", c, mode, err)
		}
		for _, p := range prints {
			r, ok := byseq[p.seq]
			if !ok {
				if leased[p.seq] {
					continue // acked
				}
				t.Fatalf("cycle %d (%s): append %d (%s) returned, then the record was gone after the kill", c, mode, p.seq, p.dev)
			}
			if d := deviceOf(t, r); d != p.dev {
				t.Fatalf("cycle %d (%s): seq %d is %s, the child appended %s", c, mode, p.seq, d, p.dev)
			}
		}
		st := b.Stats()
		if st.Salvages != 0 {
			t.Fatalf("cycle %d (%s): a kill corrupted the file", c, mode)
		}
		seq, err := b.Append(context.Background(), testPacket(fmt.Sprintf("parent-%d", c), false))
		if err != nil || seq <= maxSeen || seq <= st.LastSeq-1 {
			t.Fatalf("cycle %d (%s): next seq %d (%v), highest seen %d", c, mode, seq, err, maxSeen)
		}
		maxSeen = seq
		// Keep the file small: ack all but the newest few hundred.
		var ack []uint64
		for s := range byseq {
			if s+300 < seq {
				ack = append(ack, s)
			}
		}
		if err := b.Ack(ack...); err != nil {
			t.Fatal(err)
		}
		kept = uint64(b.Len())
		if err := b.Close(); err != nil {
			t.Fatal(err)
		}
	}
	mustBeSound(t, path)
	t.Logf("%d kills in %v: %d appends returned and checked; %d records left", cycles, time.Since(start).Round(time.Millisecond), appended, kept)
}

// runAndKill starts the child on path, lets it append for about d after its
// first append, kills it with SIGKILL and returns its complete output lines.
func runAndKill(t *testing.T, path, mode string, cycle int, d time.Duration) []string {
	t.Helper()
	args := []string{os.Args[0], "-test.run=^TestCrashChild$", "-test.count=1"}
	// Under go test -exec (qemu-user without binfmt_misc) the child must be
	// started through the same wrapper: scripts/cross-build/qemu-check sets it.
	if w := strings.Fields(os.Getenv("FIELDLINK_TEST_EXEC")); len(w) > 0 {
		args = append(w, args...)
	}
	cmd := exec.Command(args[0], args[1:]...)
	cmd.Env = append(os.Environ(), crashEnvPath+"="+path, crashEnvMode+"="+mode, crashEnvCycle+"="+strconv.Itoa(cycle))
	var stderr bytes.Buffer
	cmd.Stderr = &stderr
	out, err := cmd.StdoutPipe()
	if err != nil {
		t.Fatal(err)
	}
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	first := make(chan struct{})
	var lines []string
	read := make(chan struct{})
	go func() {
		defer close(read)
		r := bufio.NewReader(out)
		for {
			line, err := r.ReadString('\n')
			if err != nil {
				return // a last line without its newline was cut by the kill
			}
			if len(lines) == 0 {
				close(first)
			}
			lines = append(lines, strings.TrimSuffix(line, "\n"))
		}
	}()
	select {
	case <-first:
		time.Sleep(d)
	case <-read:
	case <-time.After(20 * time.Second):
		t.Errorf("cycle %d: the child printed nothing in 20s", cycle)
	}
	_ = cmd.Process.Kill() // SIGKILL
	<-read
	_ = cmd.Wait()
	if len(lines) == 0 {
		t.Fatalf("cycle %d (%s): no output; stderr:\n%s", cycle, mode, stderr.String())
	}
	return lines
}
