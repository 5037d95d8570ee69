package buffer

import (
	"errors"
	"fmt"
	"path/filepath"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"fieldlink/internal/testtool"
	"fieldlink/packet"
)

// runAppender starts a's Run and closes a when the test ends.
func runAppender(t *testing.T, a *Appender) {
	t.Helper()
	go a.Run()
	t.Cleanup(a.Close)
}

// TestAppenderGroupsCommits queues packets before Run starts: Run must take
// them in batches of at most 1024, one commit each, not one commit per
// packet.
func TestAppenderGroupsCommits(t *testing.T) {
	b, _ := newT(t, Options{})
	a := NewAppender(b, AppenderOptions{Logger: quietLogger()})
	const n = 3000 // 1024 + 1024 + 952
	for i := range n {
		a.Put(testPacket(fmt.Sprint(i), i%100 == 0))
	}
	before := b.Stats().Commits
	go a.Run()
	a.Close()
	if a.Stored() != n || a.Failed() != 0 || b.Len() != n {
		t.Fatalf("stored %d, failed %d, Len %d; want %d, 0, %d", a.Stored(), a.Failed(), b.Len(), n, n)
	}
	if c := b.Stats().Commits - before; c != 3 {
		t.Fatalf("%d packets queued together took %d commits, want 3", n, c)
	}
}

// TestAppenderCloseStoresEverything puts from several goroutines while Run
// runs: Close must return only once every packet is stored, each seen once
// by OnStored with its own Seq.
func TestAppenderCloseStoresEverything(t *testing.T) {
	b, _ := newT(t, Options{})
	var mu sync.Mutex
	seen := map[uint64]string{}
	a := NewAppender(b, AppenderOptions{Logger: quietLogger(), OnStored: func(p *packet.Packet) {
		mu.Lock()
		defer mu.Unlock()
		if prev, dup := seen[p.Seq]; dup || p.Seq == 0 || p.Epoch != b.Epoch() {
			t.Errorf("OnStored: seq %d epoch %q for %s (seen for %q)", p.Seq, p.Epoch, p.DeviceID, prev)
		}
		seen[p.Seq] = p.DeviceID
	}})
	go a.Run()
	const goroutines, each = 8, 500
	var wg sync.WaitGroup
	for g := range goroutines {
		wg.Go(func() {
			for i := range each {
				a.Put(testPacket(fmt.Sprintf("%d-%d", g, i), false))
			}
		})
	}
	wg.Wait()
	a.Close()
	const n = goroutines * each
	if a.Stored() != n || a.Failed() != 0 || len(seen) != n || b.Len() != n {
		t.Fatalf("stored %d, failed %d, OnStored %d, Len %d; want %d", a.Stored(), a.Failed(), len(seen), b.Len(), n)
	}
	for _, r := range all(t, b) {
		if id := deviceOf(t, r); seen[r.Seq] != id {
			t.Fatalf("record %d is %s, OnStored saw %q", r.Seq, id, seen[r.Seq])
		}
	}
	a.Close() // twice: fine
}

// TestAppenderPutBlocksOnlyWhenFull checks that 4096 queued packets do not
// block Put, and that the next one waits for Run, then is stored.
func TestAppenderPutBlocksOnlyWhenFull(t *testing.T) {
	b, _ := newT(t, Options{})
	a := NewAppender(b, AppenderOptions{Logger: quietLogger()})
	blocked := make(chan struct{})
	var fulls atomic.Int32
	a.full = func() {
		if fulls.Add(1) == 1 {
			close(blocked)
		}
	}
	for i := range appenderQueue {
		a.Put(testPacket(fmt.Sprint(i), false)) // no Run yet: must not block
	}
	if fulls.Load() != 0 {
		t.Fatalf("Put found the queue full before %d packets", appenderQueue)
	}
	put := make(chan struct{})
	go func() {
		a.Put(testPacket("one too many", false))
		close(put)
	}()
	<-blocked // the last Put saw the queue full
	select {
	case <-put:
		t.Fatal("Put returned with the queue full and no Run")
	default:
	}
	go a.Run()
	<-put
	a.Close()
	if a.Stored() != appenderQueue+1 {
		t.Fatalf("stored %d, want %d", a.Stored(), appenderQueue+1)
	}
}

// TestAppenderFatal makes a commit fail with EIO: OnFatal must be called
// once, Fatal must return ErrFatal, and every later packet must be counted
// as failed, none stored, while Put keeps returning.
func TestAppenderFatal(t *testing.T) {
	var eio atomic.Bool
	path := filepath.Join(t.TempDir(), "buffer.db")
	b, err := Open(path, Options{Logger: quietLogger(), failCommit: failWhen(&eio, eioAt(path))})
	if err != nil {
		t.Fatal(err)
	}
	defer b.Close()
	var fatals atomic.Int32
	a := NewAppender(b, AppenderOptions{Logger: quietLogger(), OnFatal: func() { fatals.Add(1) }})
	runAppender(t, a)
	for i := range 5 {
		a.Put(testPacket(fmt.Sprint("good-", i), false))
	}
	testtool.WaitFor(t, 10*time.Second, "5 packets stored", func() bool { return a.Stored() == 5 })
	if a.Fatal() != nil {
		t.Fatalf("Fatal before any failure: %v", a.Fatal())
	}
	eio.Store(true)
	a.Put(testPacket("bad", false))
	testtool.WaitFor(t, 10*time.Second, "the fatal error", func() bool { return a.Failed() == 1 })
	if err := a.Fatal(); !errors.Is(err, ErrFatal) {
		t.Fatalf("Fatal: %v, want ErrFatal", err)
	}
	eio.Store(false)   // never retried
	const later = 5000 // more than the queue holds: Put must not hang
	for i := range later {
		a.Put(testPacket(fmt.Sprint("later-", i), false))
	}
	a.Close()
	if n := fatals.Load(); n != 1 {
		t.Fatalf("OnFatal called %d times, want 1", n)
	}
	if a.Stored() != 5 || a.Failed() != 1+later || b.Len() != 5 {
		t.Fatalf("stored %d, failed %d, Len %d; want 5, %d, 5", a.Stored(), a.Failed(), b.Len(), 1+later)
	}
}

// TestAppenderPutAfterClose checks that a Put after Close neither panics
// nor stores: it is counted as failed and logged.
func TestAppenderPutAfterClose(t *testing.T) {
	b, _ := newT(t, Options{})
	logs := &testtool.SyncBuffer{}
	a := NewAppender(b, AppenderOptions{Logger: logTo(logs)})
	go a.Run()
	a.Put(testPacket("before", false))
	a.Close()
	a.Put(testPacket("after", false))
	a.Put(nil)
	if a.Stored() != 1 || a.Failed() != 2 || b.Len() != 1 {
		t.Fatalf("stored %d, failed %d, Len %d; want 1, 2, 1", a.Stored(), a.Failed(), b.Len())
	}
	if !logged(logs, "ERROR", "after the appender closed") {
		t.Fatalf("Put after Close not logged:\n%s", logs)
	}
}

// A poll cycle's packets (each but the last says More) share one commit,
// however they trickle in, and the cycle's end commits at once.
func TestAppenderWaitsForTheCycle(t *testing.T) {
	b, _ := newT(t, Options{})
	a := NewAppender(b, AppenderOptions{Logger: quietLogger()})
	a.linger = time.Hour // only the cycle's end may commit
	runAppender(t, a)
	before := b.Stats().Commits
	const n = 5
	for i := range n {
		p := testPacket(fmt.Sprint("dev-", i), false)
		p.More = i < n-1
		a.Put(p)
		time.Sleep(time.Millisecond) // the next poll takes a while
	}
	testtool.WaitFor(t, 10*time.Second, "the cycle stored", func() bool { return a.Stored() == n })
	if c := b.Stats().Commits - before; c != 1 {
		t.Fatalf("a cycle of %d packets took %d commits, want 1", n, c)
	}
}

// An alarm is committed at once, even in the middle of a cycle.
func TestAppenderAlarmDoesNotWait(t *testing.T) {
	b, _ := newT(t, Options{})
	a := NewAppender(b, AppenderOptions{Logger: quietLogger()})
	a.linger = time.Hour
	runAppender(t, a)
	p := testPacket("alarm", true)
	p.More = true
	a.Put(p)
	testtool.WaitFor(t, 10*time.Second, "the alarm stored", func() bool { return a.Stored() == 1 })
}

// A cycle whose rest never comes is committed after the linger.
func TestAppenderLingerIsBounded(t *testing.T) {
	b, _ := newT(t, Options{})
	a := NewAppender(b, AppenderOptions{Logger: quietLogger()})
	a.linger = 5 * time.Millisecond
	runAppender(t, a)
	p := testPacket("lonely", false)
	p.More = true
	a.Put(p)
	testtool.WaitFor(t, 10*time.Second, "the packet stored", func() bool { return a.Stored() == 1 })
}
