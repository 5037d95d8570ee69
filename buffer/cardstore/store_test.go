package cardstore

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"log/slog"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"fieldlink/buffer"
	"fieldlink/internal/testtool"
	"fieldlink/packet"
)

// fakeCard is a real buffer whose appends fail as a card would make them.
type fakeCard struct {
	*buffer.Buffer
	mu  sync.Mutex
	err error // the next appends' error; nil: the buffer's own answer
}

func (f *fakeCard) fail(err error) {
	f.mu.Lock()
	f.err = err
	f.mu.Unlock()
}

func (f *fakeCard) AppendAll(ctx context.Context, ps ...*packet.Packet) error {
	f.mu.Lock()
	err := f.err
	f.mu.Unlock()
	if err != nil {
		for _, p := range ps {
			p.Seq, p.Epoch = 0, ""
		}
		return err
	}
	return f.Buffer.AppendAll(ctx, ps...)
}

// rig is a store on a fake card whose opening the test controls.
type rig struct {
	t       *testing.T
	path    string
	log     *testtool.SyncBuffer
	mu      sync.Mutex
	openErr error // what opening the card answers; nil opens it
	card    *fakeCard
	s       *Store
}

func newRig(t *testing.T, openErr error) *rig {
	t.Helper()
	dir := t.TempDir()
	r := &rig{t: t, path: filepath.Join(dir, "buffer.db"), log: &testtool.SyncBuffer{}, openErr: openErr}
	s, err := Open(Options{
		Path: r.path, VolatileDir: filepath.Join(dir, "run"),
		OpenCard: r.open,
		Logger:   slog.New(slog.NewTextHandler(r.log, nil)),
	})
	if err != nil {
		t.Fatal(err)
	}
	r.s = s
	t.Cleanup(func() { _ = s.Close() })
	return r
}

func (r *rig) open() (Buffer, error) {
	r.mu.Lock()
	defer r.mu.Unlock()
	if r.openErr != nil {
		return nil, r.openErr
	}
	b, err := buffer.Open(r.path, buffer.Options{})
	if err != nil {
		return nil, err
	}
	r.card = &fakeCard{Buffer: b}
	return r.card, nil
}

func (r *rig) setOpenErr(err error) {
	r.mu.Lock()
	r.openErr = err
	r.mu.Unlock()
}

func reading(dev string, alarm bool) *packet.Packet {
	p := &packet.Packet{At: time.Date(2026, 12, 4, 8, 0, 0, 0, time.UTC), SiteID: "001", DataType: "Gas",
		GatewayID: "gw-01", DeviceID: dev, Fields: []packet.Field{{Name: "CH4", Value: packet.Float(0.4, 2)}}}
	if alarm {
		p.Fields[0].Value = packet.Float(1.2, 2)
		p.AlarmFields = []string{"CH4"}
	}
	return p
}

// put appends one packet per device name and fails the test on an error.
func (r *rig) put(devs ...string) []*packet.Packet {
	r.t.Helper()
	ps := make([]*packet.Packet, len(devs))
	for i, d := range devs {
		ps[i] = reading(d, strings.HasPrefix(d, "alarm"))
	}
	if err := r.s.AppendAll(context.Background(), ps...); err != nil {
		r.t.Fatal(err)
	}
	for _, p := range ps {
		if p.Seq == 0 {
			r.t.Fatalf("%s not stored", p.DeviceID)
		}
	}
	return ps
}

// drain leases and acks everything, and returns the device ids in the
// order leased, with a V for those from the volatile buffer.
func (r *rig) drain() []string {
	r.t.Helper()
	var out []string
	for {
		recs, err := r.s.Lease(100)
		if err != nil {
			r.t.Fatal(err)
		}
		if len(recs) == 0 {
			return out
		}
		for _, rec := range recs {
			var p struct{ DataHead struct{ DeviceId string } }
			if err := jsonUnmarshal(rec.Data, &p); err != nil {
				r.t.Fatal(err)
			}
			id := p.DataHead.DeviceId
			if rec.Seq&Volatile != 0 {
				id += "/V"
			}
			out = append(out, id)
		}
		if err := r.s.Ack(seqsOf(recs)...); err != nil {
			r.t.Fatal(err)
		}
	}
}

func (r *rig) want(durable bool, f Fault) {
	r.t.Helper()
	st := r.s.State()
	if st.Durable != durable || st.Fault != f {
		r.t.Fatalf("state %+v, want durable %v fault %s", st, durable, f)
	}
}

// An EIO makes the card's buffer fatal: the store goes on in memory, says
// so once, and goes back to the card (closed and opened again) by itself;
// what the card held before the fault is delivered once it is back.
func TestIOErrorFallsBackAndRecovers(t *testing.T) {
	r := newRig(t, nil)
	r.put("before-1", "before-2")
	r.want(true, OK)
	r.card.fail(fmt.Errorf("%w: fsync: %w", buffer.ErrFatal, syscall.EIO))
	err := r.s.AppendAll(context.Background(), reading("during-1", false))
	if err != nil {
		t.Fatalf("append during the fault: %v", err)
	}
	r.put("during-2", "alarm-during")
	r.want(false, IOError)
	if st := r.s.State(); st.Words != "buffer not durable: the card answers I/O errors" || st.Volatile != 3 {
		t.Fatalf("state %+v", st)
	}
	if n := strings.Count(r.log.String(), "buffer not durable"); n != 1 {
		t.Fatalf("said %d times, want once:\n%s", n, r.log.String())
	}
	// The live readings flow: the card's buffer is out of the queue, the
	// volatile one in it, alarms first.
	got := strings.Join(r.drain(), " ")
	if got != "alarm-during/V during-1/V during-2/V" {
		t.Fatalf("delivered during the fault: %s", got)
	}
	// The card comes back: the retry reopens it, the next batch goes to it.
	r.card.fail(nil)
	r.s.Retry()
	r.want(false, IOError)
	r.put("after-1")
	r.want(true, OK)
	if n := strings.Count(r.log.String(), "buffer durable again"); n != 1 {
		t.Fatalf("recovery said %d times:\n%s", n, r.log.String())
	}
	if got := strings.Join(r.drain(), " "); got != "before-1 before-2 after-1" {
		t.Fatalf("delivered after the fault: %s", got)
	}
}

// A card read-only from the start (a restart on a card ext4 remounted
// read-only) starts the store without it, not durable, and a card that
// opens later is used again.
func TestReadOnlyAtStart(t *testing.T) {
	r := newRig(t, &pathError{syscall.EROFS})
	r.want(false, ReadOnly)
	r.put("a")
	if st := r.s.State(); st.Words != "buffer not durable: the card is read-only" || st.Volatile != 1 {
		t.Fatalf("state %+v", st)
	}
	if _, err := r.s.Aux("k"); err == nil {
		t.Fatal("aux without a card: no error")
	}
	if w := r.s.Retry(); w != 5*time.Second {
		t.Fatalf("first retry wait %v", w)
	}
	if w := r.s.Retry(); w != 10*time.Second {
		t.Fatalf("second retry wait %v, want doubled", w)
	}
	r.want(false, ReadOnly)
	r.setOpenErr(nil)
	r.s.Retry()
	r.put("b")
	r.want(true, OK)
	if got := strings.Join(r.drain(), " "); got != "b a/V" {
		t.Fatalf("delivered: %s", got)
	}
}

type pathError struct{ errno syscall.Errno }

func (e *pathError) Error() string { return "open buffer.db: " + e.errno.Error() }
func (e *pathError) Unwrap() error { return e.errno }

// A full card refuses appends without failing for good: the store goes on
// in memory and tries the card at each retry.
func TestFullCard(t *testing.T) {
	r := newRig(t, nil)
	r.put("before")
	r.card.fail(fmt.Errorf("%w: %w", buffer.ErrDiskFull, syscall.ENOSPC))
	r.put("during")
	r.want(false, Full)
	r.s.Retry()
	r.put("still") // the retry's batch fails again
	r.want(false, Full)
	if n := strings.Count(r.log.String(), "the card is full"); n != 1 {
		t.Fatalf("said %d times:\n%s", n, r.log.String())
	}
	r.card.fail(nil)
	r.s.Retry()
	r.put("after")
	r.want(true, OK)
	if got := strings.Join(r.drain(), " "); got != "before after during/V still/V" {
		t.Fatalf("delivered: %s", got)
	}
}

// A slow commit keeps the card durable and says how slow, once; a fast
// one ends it.
func TestSlowCard(t *testing.T) {
	r := newRig(t, nil)
	took := 4200 * time.Millisecond
	r.s.since = func(time.Time) time.Duration { return took }
	r.put("a")
	r.put("b")
	r.want(true, Slow)
	if st := r.s.State(); st.Words != "buffer slow: the card's writes take 4.2 s" {
		t.Fatalf("words %q", st.Words)
	}
	if n := strings.Count(r.log.String(), "buffer slow"); n != 1 {
		t.Fatalf("said %d times:\n%s", n, r.log.String())
	}
	took = 10 * time.Millisecond
	r.put("c")
	r.want(true, OK)
}

// Errors that are not the card's (the policy refusing, a context ended)
// come back as they are; the card's own never as ErrFatal.
func TestErrorsToTheCaller(t *testing.T) {
	r := newRig(t, nil)
	r.card.fail(buffer.ErrFull)
	if err := r.s.AppendAll(context.Background(), reading("x", false)); !errors.Is(err, buffer.ErrFull) {
		t.Fatalf("policy refusal: %v", err)
	}
	r.want(true, OK)
	r.card.fail(fmt.Errorf("%w: %w", buffer.ErrFatal, syscall.EIO))
	if err := r.s.AppendAll(context.Background(), reading("y", false)); errors.Is(err, buffer.ErrFatal) || err != nil {
		t.Fatalf("card fault reached the caller: %v", err)
	}
}

// A restart on a card that works again delivers what the previous run
// kept in memory.
func TestVolatileLeftByARestart(t *testing.T) {
	dir := t.TempDir()
	opt := Options{Path: filepath.Join(dir, "buffer.db"), VolatileDir: filepath.Join(dir, "run")}
	erofs := true
	opt.OpenCard = func() (Buffer, error) {
		if erofs {
			return nil, &pathError{syscall.EROFS}
		}
		b, err := buffer.Open(opt.Path, buffer.Options{})
		if err != nil {
			return nil, err
		}
		return b, nil
	}
	s, err := Open(opt)
	if err != nil {
		t.Fatal(err)
	}
	if err := s.AppendAll(context.Background(), reading("kept", false)); err != nil {
		t.Fatal(err)
	}
	epoch := s.Epoch()
	if err := s.Close(); err != nil {
		t.Fatal(err)
	}
	erofs = false
	s, err = Open(opt)
	if err != nil {
		t.Fatal(err)
	}
	defer s.Close()
	if st := s.State(); !st.Durable || st.Volatile != 1 {
		t.Fatalf("state after the restart %+v", st)
	}
	recs, err := s.Lease(10)
	if err != nil || len(recs) != 1 || recs[0].Seq&Volatile == 0 {
		t.Fatalf("next: %v %+v", err, recs)
	}
	if s.Epoch() == epoch {
		t.Fatalf("the card's buffer has the volatile one's epoch %s", epoch)
	}
}

// Wait returns when the volatile buffer gets a record, while the card's
// buffer is broken.
func TestWaitSeesVolatile(t *testing.T) {
	r := newRig(t, nil)
	r.card.fail(fmt.Errorf("%w: %w", buffer.ErrFatal, syscall.EIO))
	done := make(chan error, 1)
	go func() { done <- r.s.Wait(context.Background()) }()
	r.put("live")
	if err := <-done; err != nil {
		t.Fatal(err)
	}
}

func jsonUnmarshal(b []byte, v any) error { return json.Unmarshal(b, v) }

// A card that takes new readings all the time does not starve the
// volatile buffer: the oldest reading goes first, whichever buffer holds
// it, even one record at a time.
func TestVolatileNotStarved(t *testing.T) {
	r := newRig(t, nil)
	r.card.fail(fmt.Errorf("%w: %w", buffer.ErrDiskFull, syscall.ENOSPC))
	r.put("during")
	r.card.fail(nil)
	r.s.Retry()
	for i := range 3 {
		p := reading(fmt.Sprintf("after-%d", i), false)
		p.At = p.At.Add(time.Duration(i+1) * time.Second)
		if err := r.s.AppendAll(context.Background(), p); err != nil {
			t.Fatal(err)
		}
	}
	r.want(true, OK)
	recs, err := r.s.Lease(1)
	if err != nil || len(recs) != 1 || recs[0].Seq&Volatile == 0 {
		t.Fatalf("first of one: %v %+v, want the volatile reading", err, recs)
	}
}

// LeftVolatile finds the volatile buffer a stopped gateway left for a
// card buffer, in the default directories, and no other card's.
func TestLeftVolatile(t *testing.T) {
	card := filepath.Join(t.TempDir(), "buffer.db")
	if p, ok := LeftVolatile(card); ok {
		t.Fatalf("a volatile buffer before any: %s", p)
	}
	s := &Store{opt: Options{Path: card}}
	p := s.volatilePath()
	if p == "" {
		t.Fatal("no directory for the volatile buffer")
	}
	if err := os.WriteFile(p, nil, 0o600); err != nil {
		t.Fatal(err)
	}
	defer os.Remove(p)
	if got, ok := LeftVolatile(card); !ok || got != p {
		t.Errorf("LeftVolatile = %q, %v; want %q", got, ok, p)
	}
	if got, ok := LeftVolatile(filepath.Join(t.TempDir(), "buffer.db")); ok {
		t.Errorf("another card's volatile buffer: %q", got)
	}
}
