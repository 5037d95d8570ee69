package main

// The end-to-end tests' ledger: every packet stored against every copy
// each broker delivered, and the report that judges them.

import (
	"fmt"
	"slices"
	"strings"
	"sync"
	"time"

	"fieldlink/internal/testtool"
	"fieldlink/packet"
)

// e2eLedger records what the gateway stored (its -print lines) and what
// each broker's subscriber received.
type e2eLedger struct {
	mu       sync.Mutex
	epoch    string
	storedAt map[uint64]time.Time
	max      uint64
	recv     []map[uint64]int // per broker: seq → receipts
	firstAt  map[uint64]time.Time
	receipts int
	problems []string
}

func newE2ELedger(brokers int) *e2eLedger {
	l := &e2eLedger{storedAt: map[uint64]time.Time{}, firstAt: map[uint64]time.Time{}}
	for range brokers {
		l.recv = append(l.recv, map[uint64]int{})
	}
	return l
}

func (l *e2eLedger) problem(s string) {
	l.mu.Lock()
	defer l.mu.Unlock()
	l.problems = append(l.problems, s)
}

// checkEpoch notes a packet of another buffer epoch; l.mu is held.
func (l *e2eLedger) checkEpoch(p *packet.Packet, where string) {
	switch {
	case p.Epoch == "":
		l.problems = append(l.problems, fmt.Sprintf("%s: seq %d has no epoch", where, p.Seq))
	case l.epoch == "":
		l.epoch = p.Epoch
	case p.Epoch != l.epoch:
		l.problems = append(l.problems, fmt.Sprintf("%s: seq %d of epoch %s, want %s", where, p.Seq, p.Epoch, l.epoch))
	}
}

// stored takes one -print line of the gateway.
func (l *e2eLedger) stored(line []byte) {
	now := time.Now()
	p, err := packet.Decode(line)
	l.mu.Lock()
	defer l.mu.Unlock()
	if err != nil {
		l.problems = append(l.problems, fmt.Sprintf("gateway stdout: %v: %s", err, line))
		return
	}
	if err := testtool.CheckPacket(line); err != nil {
		l.problems = append(l.problems, fmt.Sprintf("gateway stdout: not as docs/schema/packet.schema.json says: %v: %s", err, line))
	}
	l.checkEpoch(p, "stored")
	if _, dup := l.storedAt[p.Seq]; dup {
		l.problems = append(l.problems, fmt.Sprintf("seq %d stored twice", p.Seq))
	}
	l.storedAt[p.Seq] = now
	l.max = max(l.max, p.Seq)
}

// received takes one message of broker i's subscriber.
func (l *e2eLedger) received(i int, topic string, payload []byte) {
	if strings.HasSuffix(topic, "/status") {
		return // the gateway's retained online/offline
	}
	now := time.Now()
	p, err := packet.Decode(payload)
	l.mu.Lock()
	defer l.mu.Unlock()
	if err != nil {
		l.problems = append(l.problems, fmt.Sprintf("broker %d, topic %s: %v: %s", i, topic, err, payload))
		return
	}
	if err := testtool.CheckPacket(payload); err != nil {
		l.problems = append(l.problems, fmt.Sprintf("broker %d, topic %s: not as docs/schema/packet.schema.json says: %v: %s", i, topic, err, payload))
	}
	l.checkEpoch(p, topic)
	if p.GatewayID != "gw-e2e" {
		l.problems = append(l.problems, fmt.Sprintf("topic %s: seq %d from gateway %q", topic, p.Seq, p.GatewayID))
	}
	l.recv[i][p.Seq]++
	l.receipts++
	if _, ok := l.firstAt[p.Seq]; !ok {
		l.firstAt[p.Seq] = now
	}
}

func (l *e2eLedger) maxStored() uint64 {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.max
}

// maxStoredBy returns the highest seq printed as stored by time at.
func (l *e2eLedger) maxStoredBy(at time.Time) uint64 {
	l.mu.Lock()
	defer l.mu.Unlock()
	var m uint64
	for s, ts := range l.storedAt {
		if !ts.After(at) && s > m {
			m = s
		}
	}
	return m
}

func (l *e2eLedger) storedSeqs() []uint64 {
	l.mu.Lock()
	defer l.mu.Unlock()
	out := make([]uint64, 0, len(l.storedAt))
	for s := range l.storedAt {
		out = append(out, s)
	}
	slices.Sort(out)
	return out
}

// missing lists the seqs in (lo, hi] that none of brokers received.
func (l *e2eLedger) missing(lo, hi uint64, brokers ...int) []uint64 {
	l.mu.Lock()
	defer l.mu.Unlock()
	var out []uint64
next:
	for s := lo + 1; s <= hi; s++ {
		for _, i := range brokers {
			if l.recv[i][s] > 0 {
				continue next
			}
		}
		out = append(out, s)
	}
	return out
}

// countOn is how many distinct seqs in (lo, hi] broker i received.
func (l *e2eLedger) countOn(i int, lo, hi uint64) int {
	l.mu.Lock()
	defer l.mu.Unlock()
	n := 0
	for s := range l.recv[i] {
		if s > lo && s <= hi {
			n++
		}
	}
	return n
}

// receiptsAfter counts the receipts, on any broker, of seqs above lo.
func (l *e2eLedger) receiptsAfter(lo uint64) int {
	l.mu.Lock()
	defer l.mu.Unlock()
	n := 0
	for _, m := range l.recv {
		for s, k := range m {
			if s > lo {
				n += k
			}
		}
	}
	return n
}

// shares formats each broker's count and share of the seqs in (lo, hi].
func (l *e2eLedger) shares(lo, hi uint64) string {
	parts := make([]string, len(l.recv))
	for i := range l.recv {
		n := l.countOn(i, lo, hi)
		parts[i] = fmt.Sprintf("%d (%.0f%%)", n, 100*float64(n)/float64(max(hi-lo, 1)))
	}
	return strings.Join(parts, " / ")
}

// e2eReport accounts for every seq once the gateway has stopped.
type e2eReport struct {
	minSeq, maxSeq     uint64
	distinct, receipts int
	missing            []uint64
	dups               []string
	longest            time.Duration
	problems           []string
}

// account checks that the stored seqs are 1..max without a gap, that each
// reached a broker or is still in the buffer (left), and that nothing
// arrived that was never stored.
func (l *e2eLedger) account(left map[uint64]bool) e2eReport {
	l.mu.Lock()
	defer l.mu.Unlock()
	r := e2eReport{maxSeq: l.max, receipts: l.receipts, problems: slices.Clone(l.problems)}
	r.minSeq = l.max
	for s := range l.storedAt {
		r.minSeq = min(r.minSeq, s)
	}
	for s := uint64(1); s <= l.max; s++ {
		storedAt, stored := l.storedAt[s]
		if !stored {
			r.problems = append(r.problems, fmt.Sprintf("seq %d was never printed as stored: a gap in the seqs", s))
		}
		total := 0
		var where []string
		for i, m := range l.recv {
			if m[s] > 0 {
				total += m[s]
				where = append(where, fmt.Sprintf("%c", 'A'+i))
			}
		}
		if total == 0 {
			if !left[s] {
				r.missing = append(r.missing, s)
			}
			continue
		}
		r.distinct++
		if total > 1 {
			r.dups = append(r.dups, fmt.Sprintf("%d×%d@%s", s, total, strings.Join(where, "")))
		}
		if stored {
			r.longest = max(r.longest, l.firstAt[s].Sub(storedAt))
		}
	}
	for _, m := range l.recv {
		for s := range m {
			if s == 0 || s > l.max {
				r.problems = append(r.problems, fmt.Sprintf("seq %d arrived but was never stored", s))
			}
		}
	}
	for s := range left {
		if s > l.max {
			r.problems = append(r.problems, fmt.Sprintf("seq %d is in the buffer but was never printed as stored", s))
		}
	}
	return r
}

// e2eHead returns the first n elements of s, for messages.
func e2eHead[T any](s []T, n int) []T {
	if len(s) > n {
		return s[:n]
	}
	return s
}
