package buffer

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"slices"
	"sync/atomic"
	"testing"
	"time"

	"fieldlink/internal/testtool"
	"fieldlink/packet"
)

func TestMaxBytesDropOldest(t *testing.T) {
	sizeN := recordSizeOf(t, testPacket("n-00", false))
	sizeA := recordSizeOf(t, testPacket("a-00", true))
	max := 2*sizeA + 8*sizeN
	b, _ := newT(t, Options{MaxBytes: max})
	for _, id := range []string{"a-00", "a-01"} {
		mustAppend(t, b, testPacket(id, true))
	}
	for i := range 14 {
		mustAppend(t, b, testPacket(fmt.Sprintf("n-%02d", i), false))
	}
	// The alarms stay; the newest normal records that fit stay.
	got := devices(t, all(t, b))
	normals := got[2:]
	if !slices.Equal(got[:2], []string{"a-00", "a-01"}) || len(normals) < 8 ||
		!slices.Equal(normals, ids2("n-", 14-len(normals), 14)) {
		t.Fatalf("after overflow: %v", got)
	}
	st := b.Stats()
	if st.EvictedMaxBytes != uint64(14-len(normals)) || st.RejectedFull != 0 || st.Bytes > max {
		t.Fatalf("stats: evicted %d (want %d), rejected %d, bytes %d > %d",
			st.EvictedMaxBytes, 14-len(normals), st.RejectedFull, st.Bytes, max)
	}
	// Alarms go last: alarms push out every normal record before the
	// first alarm goes.
	for i := 2; i < 12; i++ {
		mustAppend(t, b, testPacket(fmt.Sprintf("a-%02d", i), true))
		recs := all(t, b)
		if !recs[0].Alarm || deviceOf(t, recs[0]) != "a-00" && slices.ContainsFunc(recs, func(r Record) bool { return !r.Alarm }) {
			t.Fatalf("an alarm was evicted while normal records were left: %v", devices(t, recs))
		}
	}
	got = devices(t, all(t, b))
	if len(got) > 10 || !slices.Equal(got, ids2("a-", 12-len(got), 12)) {
		t.Fatalf("after the alarms: %v", got)
	}
	// Only alarms left: a normal packet that does not fit in the room left
	// is rejected, an alarm gets in.
	room := max - b.Bytes()
	n99 := testPacket("n-99", false)
	n99.Fields = append(n99.Fields, packet.Field{Name: "Pad", Value: packet.String(string(bytes.Repeat([]byte("x"), int(room))))})
	if _, err := b.Append(context.Background(), n99); !errors.Is(err, ErrFull) {
		t.Fatalf("normal packet into a buffer of alarms: %v, want ErrFull", err)
	}
	mustAppend(t, b, testPacket("a-12", true))
	st = b.Stats()
	if st.RejectedFull != 1 || st.Normal != 0 || st.Bytes > max || st.EvictedMaxBytes != uint64(2+14+11-st.Alarms) {
		t.Fatalf("stats: %+v", st)
	}
}

func TestMaxBytesRejectNew(t *testing.T) {
	sizeN := recordSizeOf(t, testPacket("n-00", false))
	max := 4 * sizeN
	b, path := newT(t, Options{MaxBytes: max, WhenFull: RejectNew})
	for i := range 4 {
		mustAppend(t, b, testPacket(fmt.Sprintf("n-%02d", i), false))
	}
	for i := 4; i < 7; i++ {
		p := testPacket(fmt.Sprintf("n-%02d", i), false)
		if _, err := b.Append(context.Background(), p); !errors.Is(err, ErrFull) || p.Seq != 0 {
			t.Fatalf("append into a full buffer: %v (Seq %d), want ErrFull", err, p.Seq)
		}
	}
	// An alarm still gets in, evicting the oldest normal records.
	mustAppend(t, b, testPacket("a-00", true))
	got := devices(t, all(t, b))
	normals := got[1:]
	if got[0] != "a-00" || len(normals) == 0 || len(normals) >= 4 || !slices.Equal(normals, ids2("n-", 4-len(normals), 4)) {
		t.Fatalf("got %v", got)
	}
	evicted := uint64(4 - len(normals))
	st := b.Stats()
	if st.RejectedFull != 3 || st.EvictedMaxBytes != evicted {
		t.Fatalf("rejected %d, evicted %d; want 3, %d", st.RejectedFull, st.EvictedMaxBytes, evicted)
	}
	// A record larger than MaxBytes is rejected under either policy.
	big := testPacket("big", true)
	big.Fields = append(big.Fields, packet.Field{Name: "Blob", Value: packet.String(string(make([]byte, 5*sizeN)))})
	if _, err := b.Append(context.Background(), big); !errors.Is(err, ErrFull) {
		t.Fatalf("huge packet: %v, want ErrFull", err)
	}
	// The counters survive a restart.
	b.Close()
	b = openT(t, path, Options{MaxBytes: max, WhenFull: RejectNew})
	if st := b.Stats(); st.RejectedFull != 4 || st.EvictedMaxBytes != evicted {
		t.Fatalf("after reopen: rejected %d, evicted %d", st.RejectedFull, st.EvictedMaxBytes)
	}
}

func TestMaxAge(t *testing.T) {
	var now atomic.Int64
	start := time.Date(2026, 1, 1, 0, 0, 0, 0, time.UTC)
	now.Store(start.UnixNano())
	clock := func() time.Time { return time.Unix(0, now.Load()) }
	b, _ := newT(t, Options{MaxAge: 10 * time.Second, Now: clock}) // checked every second
	for i := range 6 {
		p := testPacket(fmt.Sprintf("d-%d", i), i == 0)
		p.At = start.Add(time.Duration(i) * 2 * time.Second)
		mustAppend(t, b, p)
	}
	// At 0:16 everything read before 0:06 is too old: d-0 (an alarm) to d-2.
	now.Store(start.Add(16 * time.Second).UnixNano())
	testtool.WaitFor(t, 10*time.Second, "age eviction", func() bool { return b.Len() == 3 })
	if got := devices(t, all(t, b)); !slices.Equal(got, []string{"d-3", "d-4", "d-5"}) {
		t.Fatalf("left: %v", got)
	}
	if st := b.Stats(); st.EvictedMaxAge != 3 || st.EvictedMaxBytes != 0 {
		t.Fatalf("evicted by age %d, by bytes %d", st.EvictedMaxAge, st.EvictedMaxBytes)
	}
}
