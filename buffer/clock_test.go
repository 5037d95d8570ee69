package buffer

import (
	"bytes"
	"fmt"
	"sync/atomic"
	"testing"
	"time"

	"fieldlink/internal/testtool"
	"fieldlink/packet"
)

// fakeClock is a wall clock, a monotonic clock and the kernel's NTP
// state, all set by the test.
type fakeClock struct {
	wall   atomic.Int64 // Unix nanoseconds
	mono   atomic.Int64
	synced atomic.Bool
	asked  chan bool // each answer of Synced, if not full
}

func newFakeClock(wall time.Time, mono time.Duration) *fakeClock {
	c := &fakeClock{asked: make(chan bool, 1)}
	c.set(wall, mono)
	return c
}

func (c *fakeClock) set(wall time.Time, mono time.Duration) {
	c.wall.Store(wall.UnixNano())
	c.mono.Store(int64(mono))
}

func (c *fakeClock) options(boot string) Options {
	return Options{
		Now:  func() time.Time { return time.Unix(0, c.wall.Load()).UTC() },
		Mono: func() time.Duration { return time.Duration(c.mono.Load()) },
		Synced: func() bool {
			v := c.synced.Load()
			select {
			case c.asked <- v:
			default:
			}
			return v
		},
		BootID: boot,
	}
}

// reading is a packet read at the fake clock's present, marked as the
// agent marks it while the clock is not synchronised.
func (c *fakeClock) reading(id string, alarm bool) *packet.Packet {
	p := testPacket(id, alarm)
	p.Loc = time.FixedZone("CST", 8*3600)
	p.At = time.Unix(0, c.wall.Load()).UTC()
	if !c.synced.Load() {
		p.ClockUnsynced, p.Mono = true, time.Duration(c.mono.Load())
	}
	return p
}

// byDevice returns the buffer's records by device id.
func byDevice(t *testing.T, b *Buffer) map[string]Record {
	t.Helper()
	m := map[string]Record{}
	for _, r := range all(t, b) {
		p, err := packet.Decode(r.Data)
		if err != nil {
			t.Fatalf("record %d: %v: %s", r.Seq, err, r.Data)
		}
		m[p.DeviceID] = r
	}
	return m
}

// TestRestamp: records stamped while the clock was not synchronised carry
// the mark; once it is, the records of this boot are re-stamped from the
// monotonic clock, span by span (the unsynchronised clock stepped once in
// between), alarms too, and lose the mark; a record of an earlier boot
// keeps the mark and its time as read.
func TestRestamp(t *testing.T) {
	truth := time.Date(2026, 3, 1, 10, 0, 0, 0, time.UTC) // at mono 1000 s
	path := t.TempDir() + "/buffer.db"

	// An earlier boot that never saw a good clock.
	old := newFakeClock(time.Unix(500, 0), 500*time.Second)
	b := openT(t, path, old.options("boot-0"))
	mustAppend(t, b, old.reading("earlier-boot", false))
	if err := b.Close(); err != nil {
		t.Fatal(err)
	}

	c := newFakeClock(time.Unix(600, 0), 600*time.Second) // 1970
	b = openT(t, path, c.options("boot-1"))
	mustAppend(t, b, c.reading("in-1970", false))
	mustAppend(t, b, c.reading("alarm-1970", true))
	c.set(truth.Add(-time.Hour-300*time.Second), 700*time.Second) // fake-hwclock: an hour behind
	mustAppend(t, b, c.reading("hour-behind", false))
	for _, r := range all(t, b) {
		if !bytes.Contains(r.Data, []byte(`"ClockUnsynced":"True"`)) {
			t.Fatalf("record %d stamped unsynchronised without the mark: %s", r.Seq, r.Data)
		}
	}
	if n, err := b.Restamp(); n != 0 || err != nil {
		t.Fatalf("Restamp with the clock not synchronised: %d, %v", n, err)
	}

	c.set(truth, 1000*time.Second)
	c.synced.Store(true)
	mustAppend(t, b, c.reading("good", false)) // re-stamps the others
	got := byDevice(t, b)
	for dev, want := range map[string]time.Time{
		"in-1970":     truth.Add(-400 * time.Second),
		"alarm-1970":  truth.Add(-400 * time.Second),
		"hour-behind": truth.Add(-300 * time.Second),
		"good":        truth,
	} {
		r := got[dev]
		p, _ := packet.Decode(r.Data)
		if !r.At.Equal(want) || !p.At.Equal(want) || p.ClockUnsynced {
			t.Errorf("%s: record at %v, packet at %v, mark %v; want %v, no mark\n%s", dev, r.At.UTC(), p.At, p.ClockUnsynced, want, r.Data)
		}
		local := want.In(time.FixedZone("CST", 8*3600))
		if date := fmt.Sprintf(`"Date":"%s","Time":"%s"`, local.Format("2006-01-02"), local.Format("15:04:05")); !bytes.Contains(r.Data, []byte(date)) {
			t.Errorf("%s: want %s in %s", dev, date, r.Data)
		}
	}
	r := got["earlier-boot"]
	if p, _ := packet.Decode(r.Data); !p.ClockUnsynced || !p.At.Equal(time.Unix(500, 0)) {
		t.Errorf("the earlier boot's record: mark %v, at %v; want its mark and 1970 kept\n%s", p.ClockUnsynced, p.At, r.Data)
	}
	if got["alarm-1970"].Alarm != true {
		t.Error("the re-stamped alarm is no longer an alarm")
	}
	// Nothing waits any more: a second good packet rewrites nothing.
	if n, err := b.Restamp(); n != 0 || err != nil {
		t.Fatalf("Restamp again: %d, %v", n, err)
	}
	var spans int
	_ = b.ScanAux(spanPrefix, func(string, []byte) error { spans++; return nil })
	if spans != 0 {
		t.Fatalf("%d clock spans kept after the re-stamp", spans)
	}
}

// TestRestampAfterRestart: a gateway restarted in the same boot before the
// clock was set re-stamps what the earlier process stored.
func TestRestampAfterRestart(t *testing.T) {
	truth := time.Date(2026, 3, 1, 10, 0, 0, 0, time.UTC)
	path := t.TempDir() + "/buffer.db"
	c := newFakeClock(time.Unix(600, 0), 600*time.Second)
	b := openT(t, path, c.options("boot-1"))
	mustAppend(t, b, c.reading("before-restart", false))
	if err := b.Close(); err != nil {
		t.Fatal(err)
	}
	b = openT(t, path, c.options("boot-1"))
	c.set(truth, 1000*time.Second)
	c.synced.Store(true)
	mustAppend(t, b, c.reading("good", false))
	if r := byDevice(t, b)["before-restart"]; !r.At.Equal(truth.Add(-400*time.Second)) || bytes.Contains(r.Data, []byte("ClockUnsynced")) {
		t.Fatalf("re-stamped at %v: %s", r.At.UTC(), r.Data)
	}
}

// TestMaxAgeWaitsForTheClock: MaxAge evicts nothing while the clock is not
// synchronised (stepped forward, it would age everything at once), and
// never a record whose stamp came from an unsynchronised clock.
func TestMaxAgeWaitsForTheClock(t *testing.T) {
	start := time.Date(2026, 3, 1, 10, 0, 0, 0, time.UTC)
	c := newFakeClock(start, 100*time.Second)
	c.synced.Store(true)
	opt := c.options("boot-1")
	opt.MaxAge = 10 * time.Second // checked every second
	b, _ := newT(t, opt)
	for i := range 3 {
		p := c.reading(fmt.Sprintf("d-%d", i), false)
		p.At = start.Add(time.Duration(i) * time.Second)
		mustAppend(t, b, p)
	}
	p := c.reading("read-in-1970", false)
	p.At, p.ClockUnsynced, p.Mono = time.Unix(60, 0), true, 60*time.Second // an earlier boot
	mustAppend(t, b, p)

	c.synced.Store(false)
	c.set(start.AddDate(0, 0, 1), 200*time.Second) // a day ahead, not synchronised
	// Until an eviction pass saw the clock unsynchronised (or evicted).
	testtool.WaitFor(t, 10*time.Second, "an eviction pass", func() bool {
		select {
		case v := <-c.asked:
			return !v
		default:
			return b.Len() != 4
		}
	})
	if n := b.Len(); n != 4 {
		t.Fatalf("%d records after an eviction pass on an unsynchronised clock, want 4", n)
	}
	c.synced.Store(true)
	testtool.WaitFor(t, 10*time.Second, "age eviction", func() bool { return b.Len() == 1 })
	if got := devices(t, all(t, b)); len(got) != 1 || got[0] != "read-in-1970" {
		t.Fatalf("left %v, want the record whose age nobody can vouch for", got)
	}
}

// TestRestampJSON: the head's times move, the zone offset stays, the mark
// goes; anything not laid out as AppendJSON writes it is left alone.
func TestRestampJSON(t *testing.T) {
	p := testPacket("d", true)
	p.Loc, p.At, p.ClockUnsynced, p.Seq, p.Epoch = time.FixedZone("X", -5*3600), time.Unix(3, 0), true, 7, "e"
	data := p.AppendJSON(nil, packet.Strings)
	at := time.Date(2026, 12, 31, 23, 30, 5, 0, time.UTC)
	got, ok := restampJSON(data, at.Add(900*time.Millisecond))
	q := *p
	q.At, q.ClockUnsynced = at.Add(900*time.Millisecond), false // TS to the millisecond
	if want := q.AppendJSON(nil, packet.Strings); !ok || !bytes.Equal(got, want) {
		t.Fatalf("restamped:\n got %s\nwant %s", got, want)
	}
	// A packet stored when TS was to the second keeps that form.
	old := bytes.Replace(data, []byte(`T00:00:03.000Z"`), []byte(`T00:00:03Z"`), 1)
	got, ok = restampJSON(old, at.Add(900*time.Millisecond))
	if want := bytes.Replace(q.AppendJSON(nil, packet.Strings), []byte(`T23:30:05.900Z"`), []byte(`T23:30:05Z"`), 1); bytes.Equal(old, data) || !ok || !bytes.Equal(got, want) {
		t.Fatalf("restamped, TS to the second:\n got %s\nwant %s", got, want)
	}
	for _, bad := range [][]byte{
		data[:40],
		bytes.Replace(data, []byte(`"TS"`), []byte(`"Ts"`), 1),
		q.AppendJSON(nil, packet.Strings), // no mark
	} {
		if _, ok := restampJSON(bad, at); ok {
			t.Errorf("re-stamped %s", bad)
		}
	}
	if _, ok := restampJSON(data, time.Date(12000, 1, 1, 0, 0, 0, 0, time.UTC)); ok {
		t.Error("re-stamped to a five-digit year")
	}
}
