package buffer

import (
	"bytes"
	"context"
	"errors"
	"flag"
	"fmt"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"

	"pgregory.net/rapid"

	"fieldlink/packet"
)

// TestModel drives random sequences of Append, AppendAll, Lease, Peek, Ack,
// Release, DeadLetter, Purge, PurgeDead and reopen against an in-memory
// model of the buffer, and checks after every step that the two agree: the
// seqs handed out, the records stored (byte for byte), the delivery order,
// the leases, the evictions and rejections, Len and Bytes, the dead letters
// and their counters.
func TestModel(t *testing.T) {
	setRapidChecks(t, 300, 3000)
	rapid.Check(t, func(rt *rapid.T) {
		opt := Options{
			Order:    rapid.SampledFrom([]Order{OldestFirst, NewestFirst}).Draw(rt, "order"),
			WhenFull: rapid.SampledFrom([]WhenFull{DropOldest, RejectNew}).Draw(rt, "when_full"),
			MaxBytes: rapid.SampledFrom([]int64{0, 1200, 3000}).Draw(rt, "max_bytes"),
			Values:   rapid.SampledFrom([]packet.ValueStyle{packet.Strings, packet.Numbers}).Draw(rt, "values"),
			Logger:   quietLogger(),

			deadMax:      rapid.SampledFrom([]int64{0, 3}).Draw(rt, "dead_max"),
			deadMaxBytes: rapid.SampledFrom([]int64{0, 1500}).Draw(rt, "dead_max_bytes"),
		}
		m := &model{opt: opt.withDefaults(), path: filepath.Join(fastTempDir(rt), "buffer.db"), leased: map[uint64]bool{}}
		m.open(rt)
		rt.Cleanup(func() { m.b.Close() })
		rt.Repeat(map[string]func(*rapid.T){
			"append":     m.append,
			"appendAll":  m.appendAll,
			"next":       m.next,
			"peek":       m.peek,
			"ack":        m.ack,
			"release":    m.release,
			"deadLetter": m.deadLetter,
			"reopen":     m.reopen,
			"purge":      m.purge,
			"purgeDead":  m.purgeDead,
			"":           m.check,
		})
	})
}

// setRapidChecks sets rapid's number of cases, unless the command line or
// RAPID_CHECKS already did.
func setRapidChecks(t *testing.T, n, long int) {
	if os.Getenv("RAPID_CHECKS") != "" {
		return
	}
	set := false
	flag.Visit(func(f *flag.Flag) { set = set || f.Name == "rapid.checks" })
	if set {
		return
	}
	if longMode() {
		n = long
	}
	old := flag.Lookup("rapid.checks").Value.String()
	if err := flag.Set("rapid.checks", fmt.Sprint(n)); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = flag.Set("rapid.checks", old) })
}

// fastTempDir returns a temporary directory on tmpfs when there is one
// (fsync costs nothing there, and the model test commits thousands of
// times), removed when the case ends.
func fastTempDir(t *rapid.T) string {
	base := ""
	if fi, err := os.Stat("/dev/shm"); err == nil && fi.IsDir() {
		base = "/dev/shm"
	}
	dir, err := os.MkdirTemp(base, "fieldlink-buffer-model-")
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { os.RemoveAll(dir) })
	return dir
}

type model struct {
	opt   Options
	path  string
	b     *Buffer
	epoch string

	recs     []mrec // by seq
	leased   map[uint64]bool
	lastSeq  uint64
	evicted  uint64
	rejected uint64
	devices  int

	dead        []mdead // oldest first
	deadLetters uint64
	deadDropped uint64
}

type mdead struct {
	mrec
	reason string
}

func (d mdead) size() int64 {
	return d.mrec.size() - keySize + deadKeySize + deadHeaderSize + int64(len(d.reason))
}

type mrec struct {
	seq   uint64
	alarm bool
	data  []byte
}

func (r mrec) size() int64 { return int64(keySize + headerSize + len(r.data)) }

func (m *model) open(t *rapid.T) {
	b, err := Open(m.path, m.opt)
	if err != nil {
		t.Fatalf("Open: %v", err)
	}
	if m.epoch != "" && b.Epoch() != m.epoch {
		t.Fatalf("epoch %s, was %s", b.Epoch(), m.epoch)
	}
	m.b, m.epoch = b, b.Epoch()
}

func (m *model) bytes() (total, alarm, normal int64) {
	for _, r := range m.recs {
		if r.alarm {
			alarm += r.size()
		} else {
			normal += r.size()
		}
	}
	return alarm + normal, alarm, normal
}

// put is the model of one append: it returns the seq, or false when the
// packet is rejected.
func (m *model) put(p *packet.Packet) (uint64, bool) {
	r := mrec{seq: m.lastSeq + 1, alarm: p.Alarm(), data: wantJSON(p, m.lastSeq+1, m.epoch, m.opt.Values)}
	total, alarm, normal := m.bytes()
	if r.size() > m.opt.MaxBytes {
		m.rejected++
		return 0, false
	}
	if over := total + r.size() - m.opt.MaxBytes; over > 0 {
		evictable := normal
		if r.alarm {
			evictable += alarm
		}
		if (!r.alarm && m.opt.WhenFull == RejectNew) || over > evictable {
			m.rejected++
			return 0, false
		}
		for _, wantAlarm := range []bool{false, true} {
			for over > 0 {
				i := slices.IndexFunc(m.recs, func(x mrec) bool { return x.alarm == wantAlarm })
				if i < 0 {
					break
				}
				over -= m.recs[i].size()
				delete(m.leased, m.recs[i].seq)
				m.recs = slices.Delete(m.recs, i, i+1)
				m.evicted++
			}
		}
	}
	m.lastSeq = r.seq
	m.recs = append(m.recs, r)
	return r.seq, true
}

func (m *model) packet(t *rapid.T) *packet.Packet {
	m.devices++
	p := testPacket(fmt.Sprintf("m-%d", m.devices), rapid.Float64Range(0, 1).Draw(t, "alarm") < 0.25)
	if pad := rapid.IntRange(0, 300).Draw(t, "pad"); pad > 0 {
		p.Fields = append(p.Fields, packet.Field{Name: "Pad", Value: packet.String(strings.Repeat("p", pad))})
	}
	return p
}

func (m *model) append(t *rapid.T) {
	p := m.packet(t)
	want, ok := m.put(p)
	seq, err := m.b.Append(context.Background(), p)
	if !ok {
		if !errors.Is(err, ErrFull) || p.Seq != 0 {
			t.Fatalf("Append: %d, %v; want ErrFull", seq, err)
		}
		return
	}
	if err != nil || seq != want || p.Seq != want || p.Epoch != m.epoch {
		t.Fatalf("Append: %d, %v (p.Seq %d); want %d", seq, err, p.Seq, want)
	}
}

func (m *model) appendAll(t *rapid.T) {
	n := rapid.IntRange(1, 6).Draw(t, "n")
	ps := make([]*packet.Packet, n)
	want := make([]uint64, n)
	anyRejected := false
	for i := range ps {
		ps[i] = m.packet(t)
		s, ok := m.put(ps[i])
		want[i] = s
		anyRejected = anyRejected || !ok
	}
	err := m.b.AppendAll(context.Background(), ps...)
	if anyRejected != errors.Is(err, ErrFull) || (err != nil && !errors.Is(err, ErrFull)) {
		t.Fatalf("AppendAll: %v; rejections expected: %v", err, anyRejected)
	}
	for i, p := range ps {
		if p.Seq != want[i] {
			t.Fatalf("AppendAll: packet %d got seq %d, want %d", i, p.Seq, want[i])
		}
	}
}

// order returns the records in delivery order, leased or not.
func (m *model) order() []mrec {
	var alarms, normal []mrec
	for _, r := range m.recs {
		if r.alarm {
			alarms = append(alarms, r)
		} else {
			normal = append(normal, r)
		}
	}
	if m.opt.Order == NewestFirst {
		slices.Reverse(normal)
	}
	return append(alarms, normal...)
}

// available returns up to max records Lease would return.
func (m *model) available(max int) []mrec {
	var out []mrec
	for _, r := range m.order() {
		if len(out) == max {
			break
		}
		if !m.leased[r.seq] {
			out = append(out, r)
		}
	}
	return out
}

func same(t *rapid.T, what string, got []Record, want []mrec) {
	if len(got) != len(want) {
		t.Fatalf("%s: %v, want %v", what, seqsOf(got), mseqs(want))
	}
	for i := range got {
		if got[i].Seq != want[i].seq || got[i].Alarm != want[i].alarm || !bytes.Equal(got[i].Data, want[i].data) {
			t.Fatalf("%s: record %d is %d (alarm %v) %s; want %d (alarm %v) %s",
				what, i, got[i].Seq, got[i].Alarm, got[i].Data, want[i].seq, want[i].alarm, want[i].data)
		}
	}
}

func mseqs(rs []mrec) []uint64 {
	s := make([]uint64, len(rs))
	for i, r := range rs {
		s[i] = r.seq
	}
	return s
}

func (m *model) next(t *rapid.T) {
	max := rapid.IntRange(1, 8).Draw(t, "max")
	want := m.available(max)
	got, err := m.b.Lease(max)
	if err != nil {
		t.Fatal(err)
	}
	same(t, "Lease", got, want)
	for _, r := range want {
		m.leased[r.seq] = true
	}
}

func (m *model) peek(t *rapid.T) {
	max := rapid.IntRange(1, 8).Draw(t, "max")
	got, err := m.b.Peek(max)
	if err != nil {
		t.Fatal(err)
	}
	same(t, "Peek", got, m.available(max))
}

// someSeqs draws a few seqs: stored ones, mostly, and the odd unknown one.
func (m *model) someSeqs(t *rapid.T, from []uint64) []uint64 {
	var seqs []uint64
	if len(from) > 0 {
		seqs = rapid.SliceOfN(rapid.SampledFrom(from), 0, 5).Draw(t, "seqs")
	}
	if rapid.Bool().Draw(t, "unknown") {
		seqs = append(seqs, m.lastSeq+uint64(rapid.IntRange(1, 3).Draw(t, "ahead")), 0)
	}
	return seqs
}

func (m *model) ack(t *rapid.T) {
	seqs := m.someSeqs(t, mseqs(m.recs))
	if err := m.b.Ack(seqs...); err != nil {
		t.Fatal(err)
	}
	for _, s := range seqs {
		m.recs = slices.DeleteFunc(m.recs, func(r mrec) bool { return r.seq == s })
		delete(m.leased, s)
	}
}

func (m *model) release(t *rapid.T) {
	var leased []uint64
	for s := range m.leased {
		leased = append(leased, s)
	}
	slices.Sort(leased)
	seqs := m.someSeqs(t, leased)
	m.b.Release(seqs...)
	for _, s := range seqs {
		delete(m.leased, s)
	}
}

func (m *model) deadLetter(t *rapid.T) {
	seqs := m.someSeqs(t, mseqs(m.recs))
	reason := rapid.SampledFrom([]string{"", "HTTP 400", "HTTP 404 Not Found: no such device"}).Draw(t, "reason")
	if err := m.b.DeadLetter(reason, seqs...); err != nil {
		t.Fatal(err)
	}
	for _, s := range sortedUnique(seqs) {
		if i := slices.IndexFunc(m.recs, func(r mrec) bool { return r.seq == s }); i >= 0 {
			m.dead = append(m.dead, mdead{m.recs[i], reason})
			m.recs = slices.Delete(m.recs, i, i+1)
			m.deadLetters++
		}
		delete(m.leased, s)
	}
	var n, size int64
	for _, d := range m.dead {
		n, size = n+1, size+d.size()
	}
	for n > m.opt.deadMax || size > m.opt.deadMaxBytes {
		n, size = n-1, size-m.dead[0].size()
		m.dead = m.dead[1:]
		m.deadDropped++
	}
}

func (m *model) reopen(t *rapid.T) {
	if err := m.b.Close(); err != nil {
		t.Fatal(err)
	}
	m.open(t)
	clear(m.leased)
}

func (m *model) purge(t *rapid.T) {
	if rapid.IntRange(0, 9).Draw(t, "purge?") != 0 { // rarely
		t.Skip("not this time")
	}
	n, err := m.b.Purge()
	if err != nil || n != len(m.recs) {
		t.Fatalf("Purge: %d, %v; want %d", n, err, len(m.recs))
	}
	m.recs = nil
	clear(m.leased)
}

func (m *model) purgeDead(t *rapid.T) {
	if rapid.IntRange(0, 4).Draw(t, "purge dead?") != 0 { // rarely
		t.Skip("not this time")
	}
	n, err := m.b.PurgeDead()
	if err != nil || n != len(m.dead) {
		t.Fatalf("PurgeDead: %d, %v; want %d", n, err, len(m.dead))
	}
	m.dead = nil
}

func (m *model) check(t *rapid.T) {
	total, _, _ := m.bytes()
	if m.b.Len() != len(m.recs) || m.b.Bytes() != total {
		t.Fatalf("Len %d Bytes %d; want %d %d", m.b.Len(), m.b.Bytes(), len(m.recs), total)
	}
	if total > m.opt.MaxBytes {
		t.Fatalf("%d bytes stored, MaxBytes %d", total, m.opt.MaxBytes)
	}
	st := m.b.Stats()
	if st.EvictedMaxBytes != m.evicted || st.RejectedFull != m.rejected || st.LastSeq != m.lastSeq {
		t.Fatalf("evicted %d rejected %d last seq %d; want %d %d %d",
			st.EvictedMaxBytes, st.RejectedFull, st.LastSeq, m.evicted, m.rejected, m.lastSeq)
	}
	var got []Record
	if err := m.b.Each(func(r Record) error { got = append(got, r); return nil }); err != nil {
		t.Fatal(err)
	}
	same(t, "Each", got, m.order())

	var dead []Record
	var reasons []string
	if err := m.b.EachDead(func(r Record, reason string) error {
		dead, reasons = append(dead, r), append(reasons, reason)
		return nil
	}); err != nil {
		t.Fatal(err)
	}
	var want []mrec
	var size int64
	for i, d := range m.dead {
		want = append(want, d.mrec)
		size += d.size()
		if i < len(reasons) && reasons[i] != d.reason {
			t.Fatalf("dead letter %d: reason %q, want %q", d.seq, reasons[i], d.reason)
		}
	}
	same(t, "EachDead", dead, want)
	if st.DeadLetters != m.deadLetters || st.DeadDropped != m.deadDropped || st.DeadDepth != len(m.dead) || st.DeadBytes != size {
		t.Fatalf("dead letters %d dropped %d depth %d bytes %d; want %d %d %d %d",
			st.DeadLetters, st.DeadDropped, st.DeadDepth, st.DeadBytes, m.deadLetters, m.deadDropped, len(m.dead), size)
	}
}
