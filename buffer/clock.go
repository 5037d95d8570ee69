package buffer

import (
	"bytes"
	"context"
	"fmt"
	"slices"
	"strconv"
	"strings"
	"time"

	"fieldlink/packet"
)

// A packet whose reading time came from a clock the kernel did not hold as
// synchronised carries packet.UnsyncedMark in its DataHead, and a
// monotonic reading (packet.Packet.Mono). Between two steps of the wall
// clock, wall minus monotonic is the same for every reading of a boot: the
// buffer keeps it once per span of such records, in the aux bucket, under
// spanPrefix + boot id + "/" + the span's first seq (16 hex digits), the
// value its offset in nanoseconds. Once the clock is synchronised, the
// records of this boot's spans are re-stamped: their reading time moves by
// the true offset minus the span's, and the mark goes. Records of an
// earlier boot cannot be put right (the monotonic clock restarted): they
// keep the mark and the time as read, and their spans are dropped at Open.
// No record format changes: an older version reads these files as they are.
const spanPrefix = "clock.span/"

// spanTolerance is how far a reading's offset may stray from its span's
// before it starts a new span (a step of the unsynchronised clock).
const spanTolerance = 250 * time.Millisecond

// span is one run of records stamped with one wall-minus-monotonic offset.
type span struct {
	first uint64 // the seq of its first record
	off   int64  // wall minus monotonic, nanoseconds
}

func spanKey(boot string, first uint64) string {
	return fmt.Sprintf("%s%s/%016x", spanPrefix, boot, first)
}

// loadSpans reads this boot's spans and drops the other boots'.
func (b *Buffer) loadSpans() error {
	var spans []span
	var drop []string
	err := b.ScanAux(spanPrefix, func(key string, value []byte) error {
		boot, first, ok := strings.Cut(strings.TrimPrefix(key, spanPrefix), "/")
		seq, err1 := strconv.ParseUint(first, 16, 64)
		off, err2 := strconv.ParseInt(string(value), 10, 64)
		if !ok || boot != b.boot || b.boot == "" || err1 != nil || err2 != nil {
			drop = append(drop, key)
			return nil
		}
		spans = append(spans, span{seq, off})
		return nil
	})
	if err != nil {
		return err
	}
	slices.SortFunc(spans, func(a, c span) int { return compare(a.first, c.first) })
	b.clockMu.Lock()
	b.spans = spans
	b.waiting.Store(len(spans) > 0)
	b.clockMu.Unlock()
	return b.DeleteAux(drop...)
}

func compare(a, c uint64) int {
	switch {
	case a < c:
		return -1
	case a > c:
		return 1
	}
	return 0
}

// noteClock records the spans of the stored packets of ps stamped from an
// unsynchronised clock, and re-stamps the buffer's once a packet comes
// with a good stamp while the clock is synchronised. It costs nothing
// while no packet is marked and no span waits.
func (b *Buffer) noteClock(ps []*packet.Packet) {
	var marked, good bool
	for _, p := range ps {
		if p.Seq == 0 {
			continue
		}
		if p.ClockUnsynced && p.Mono != 0 {
			marked = true
		} else if !p.ClockUnsynced {
			good = true
		}
	}
	waiting := b.waiting.Load()
	if marked && b.boot != "" {
		if err := b.addSpans(ps); err != nil {
			b.log.Warn("buffer: cannot keep the clock offset of packets stamped before the clock was set: they keep their mark", "path", b.path, "err", err)
		}
	}
	if good && waiting {
		if _, err := b.Restamp(); err != nil {
			b.log.Warn("buffer: re-stamping the packets stamped before the clock was set failed; the next good packet tries again", "path", b.path, "err", err)
		}
	}
}

// addSpans adds the spans that ps's marked packets open.
func (b *Buffer) addSpans(ps []*packet.Packet) error {
	b.clockMu.Lock()
	defer b.clockMu.Unlock()
	put := map[string][]byte{}
	var del []string
	for _, p := range ps {
		if p.Seq == 0 || !p.ClockUnsynced || p.Mono == 0 {
			continue
		}
		off := p.At.UnixNano() - int64(p.Mono)
		// The span the packet falls in: the last one starting at or
		// before it.
		i, _ := slices.BinarySearchFunc(b.spans, p.Seq, func(s span, seq uint64) int { return compare(s.first, seq) })
		if i < len(b.spans) && b.spans[i].first == p.Seq {
			continue
		}
		if i > 0 && abs(b.spans[i-1].off-off) <= int64(spanTolerance) {
			continue
		}
		if i < len(b.spans) && abs(b.spans[i].off-off) <= int64(spanTolerance) {
			// An append that finished late: the next span starts earlier.
			del = append(del, spanKey(b.boot, b.spans[i].first))
			delete(put, spanKey(b.boot, b.spans[i].first))
			b.spans[i].first = p.Seq
		} else {
			b.spans = slices.Insert(b.spans, i, span{p.Seq, off})
		}
		b.waiting.Store(true)
		put[spanKey(b.boot, p.Seq)] = strconv.AppendInt(nil, b.spans[i].off, 10)
	}
	for _, k := range del {
		if _, ok := put[k]; ok {
			del = slices.DeleteFunc(del, func(d string) bool { return d == k })
		}
	}
	return b.UpdateAux(put, del)
}

func abs(v int64) int64 { return max(v, -v) }

// Restamp re-stamps the records of this boot's spans, if the clock is
// synchronised (Options.Synced): each one's reading time moves by the true
// offset between the wall and the monotonic clock minus the one it was
// stamped with, and the DataHead loses its mark. It returns how many
// records it re-stamped; false clock, none. Append calls it when a packet
// with a good stamp arrives while spans wait; records leased at that
// moment go out as they were.
func (b *Buffer) Restamp() (int, error) {
	if !b.opt.Synced() {
		return 0, nil
	}
	b.clockMu.Lock()
	defer b.clockMu.Unlock()
	if len(b.spans) == 0 {
		return 0, nil
	}
	trueOff := b.opt.Now().UnixNano() - int64(b.opt.Mono())
	r := &request{op: opRestamp, restamp: &restamp{spans: slices.Clone(b.spans), off: trueOff}, done: make(chan struct{})}
	for _, s := range b.spans {
		r.auxDel = append(r.auxDel, spanKey(b.boot, s.first))
	}
	if err := b.usable(); err != nil {
		return 0, err
	}
	if err := b.send(context.Background(), r); err != nil {
		return 0, err
	}
	<-r.done
	if r.err != nil {
		return 0, r.err
	}
	b.spans = nil
	b.waiting.Store(false)
	return r.n, nil
}

// restamp is an opRestamp's work.
type restamp struct {
	spans []span // sorted by first
	off   int64  // the true wall-minus-monotonic offset
}

// restamp rewrites, in t, the marked records of the spans.
func (t *wtx) restamp(r *restamp) int {
	mark := []byte(packet.UnsyncedMark)
	n := 0
	for q := range t.q {
		type rewrite struct {
			k, v []byte
			grow int64
		}
		var out []rewrite
		for i, s := range r.spans {
			end := uint64(0) // none
			if i+1 < len(r.spans) {
				end = r.spans[i+1].first
			}
			delta := r.off - s.off
			c := t.q[q].Cursor()
			for k, v := c.Seek(itob(s.first)); k != nil && (end == 0 || btoi(k) < end); k, v = c.Next() {
				if !validRecord(k, v) || !bytes.Contains(v[headerSize:], mark) {
					continue
				}
				at := recordAt(v) + delta
				data, ok := restampJSON(v[headerSize:], time.Unix(0, at).UTC())
				if !ok {
					continue
				}
				nv := make([]byte, headerSize, headerSize+len(data))
				nv = append(nv, data...)
				key := append([]byte(nil), k...)
				sealRecord(key, nv, recordAlarm(v), at)
				out = append(out, rewrite{key, nv, recordSize(nv) - recordSize(v)})
			}
		}
		for _, w := range out {
			if err := t.q[q].Put(w.k, w.v); err != nil {
				panic("buffer: put: " + err.Error())
			}
			t.st.bytes[q] += w.grow
			n++
		}
	}
	return n
}

// restampJSON returns a packet's JSON (as packet.Packet.AppendJSON writes
// it) with its reading time set to at (UTC), in Date and Time (the
// packet's own zone offset kept) and TS, and without the unsynced mark;
// false when data is not laid out as expected, or at is not a time the
// head can carry (years 1000 to 9999).
func restampJSON(data []byte, at time.Time) ([]byte, bool) {
	const head = `{"DataHead":{"Date":"`
	const dateAt, timeAt = len(head), len(head) + len(`2006-01-02","Time":"`)
	if !bytes.HasPrefix(data, []byte(head)) || len(data) < timeAt+9 ||
		string(data[dateAt+10:timeAt]) != `","Time":"` || data[timeAt+8] != '"' {
		return nil, false
	}
	i := bytes.Index(data, []byte(`,"TS":"`))
	tsAt := i + len(`,"TS":"`)
	// TS is to the millisecond, or to the second in packets stored before
	// it carried milliseconds; it is rewritten in the form it has.
	tsForm := "2006-01-02T15:04:05.000Z"
	if i >= 0 && len(data) > tsAt+20 && data[tsAt+20] == '"' {
		tsForm = "2006-01-02T15:04:05Z"
	}
	if i < 0 || len(data) <= tsAt+len(tsForm) || data[tsAt+len(tsForm)] != '"' {
		return nil, false
	}
	oldUTC, err := time.Parse(tsForm, string(data[tsAt:tsAt+len(tsForm)]))
	if err != nil {
		return nil, false
	}
	oldLocal, err := time.Parse("2006-01-02 15:04:05", string(data[dateAt:dateAt+10])+" "+string(data[timeAt:timeAt+8]))
	if err != nil {
		return nil, false
	}
	utc := at.Truncate(time.Millisecond)
	local := utc.Truncate(time.Second).Add(oldLocal.Sub(oldUTC.Truncate(time.Second)))
	if y := utc.Year(); y < 1000 || y > 9999 {
		return nil, false
	}
	if y := local.Year(); y < 1000 || y > 9999 {
		return nil, false
	}
	j := bytes.Index(data, []byte(packet.UnsyncedMark))
	if j < tsAt {
		return nil, false
	}
	out := make([]byte, 0, len(data)-len(packet.UnsyncedMark))
	out = append(out, data[:j]...)
	out = append(out, data[j+len(packet.UnsyncedMark):]...)
	local.AppendFormat(out[dateAt:dateAt], "2006-01-02")
	local.AppendFormat(out[timeAt:timeAt], "15:04:05")
	var ts [32]byte // not in place: a fraction is formatted past its digits, then cut
	copy(out[tsAt:tsAt+len(tsForm)], utc.AppendFormat(ts[:0], tsForm))
	return out, true
}
