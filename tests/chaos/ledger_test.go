package chaos

import (
	"bytes"
	"fmt"
	"hash/fnv"
	"slices"
	"sort"
	"strings"
	"sync"
	"time"

	"fieldlink/internal/testtool"
	"fieldlink/packet"
)

// key names one packet: the buffer's epoch and the packet's Seq.
type key struct {
	epoch string
	seq   uint64
}

func (k key) String() string { return fmt.Sprintf("%s/%d", k.epoch, k.seq) }

// printed is a packet the gateway printed, so stored: produced.
type printed struct {
	at       time.Time
	instance int // which gateway process printed it (1 = the first)
	sum      uint64
	device   string
}

// receipt is what the subscribers received of one packet.
type receipt struct {
	first   time.Time
	count   int
	brokers uint8 // bit i: broker i received it
	sum     uint64
}

// ledger records what the gateway printed and what each broker's
// subscriber received. It is safe for concurrent use.
type ledger struct {
	gatewayID string

	mu       sync.Mutex
	printed  map[key]printed
	recv     map[key]*receipt
	perBrok  []int // receipts per broker
	epochs   map[string]bool
	problems []string
	phantom  int      // printed as stored, but with no epoch: never stored
	phantoms []string // the first few
}

func newLedger(gatewayID string, brokers int) *ledger {
	return &ledger{gatewayID: gatewayID, printed: map[key]printed{}, recv: map[key]*receipt{},
		perBrok: make([]int, brokers), epochs: map[string]bool{}}
}

func checksum(b []byte) uint64 {
	h := fnv.New64a()
	h.Write(bytes.TrimSpace(b))
	return h.Sum64()
}

func (l *ledger) problem(format string, args ...any) {
	l.mu.Lock()
	defer l.mu.Unlock()
	l.problemLocked(format, args...)
}

func (l *ledger) problemLocked(format string, args ...any) {
	if len(l.problems) < 200 {
		l.problems = append(l.problems, fmt.Sprintf(format, args...))
	}
}

// stored takes one stdout line of gateway instance inst.
func (l *ledger) stored(line []byte, inst int, at time.Time) {
	p, err := packet.Decode(line)
	l.mu.Lock()
	defer l.mu.Unlock()
	if err != nil {
		l.problemLocked("gateway %d stdout: %v: %.200s", inst, err, line)
		return
	}
	if err := testtool.CheckPacket(line); err != nil {
		l.problemLocked("gateway %d stdout: not as docs/schema/packet.schema.json says: %v: %.200s", inst, err, line)
	}
	k := key{p.Epoch, p.Seq}
	if p.Epoch == "" && p.Seq != 0 {
		// Not from the buffer: a packet whose append failed, printed with
		// the Seq its poller stamped on it (see knownBugs).
		l.phantom++
		if len(l.phantoms) < 5 {
			l.phantoms = append(l.phantoms, fmt.Sprintf("gateway %d at %s: %.160s", inst, at.Format("15:04:05.000"), line))
		}
		return
	}
	if p.Epoch == "" || p.Seq == 0 {
		l.problemLocked("gateway %d printed a packet without epoch or seq: %.200s", inst, line)
		return
	}
	l.epochs[p.Epoch] = true
	if prev, dup := l.printed[k]; dup {
		l.problemLocked("seq %v printed twice (by gateway %d and %d): a seq was reused", k, prev.instance, inst)
		return
	}
	sum := checksum(line)
	l.printed[k] = printed{at: at, instance: inst, sum: sum, device: p.DeviceID}
	if r := l.recv[k]; r != nil && r.sum != sum {
		l.problemLocked("seq %v: the packet a broker delivered differs from the one the gateway stored", k)
	}
}

// received takes one message of broker i's subscriber.
func (l *ledger) received(i int, topic string, payload []byte, at time.Time) {
	if strings.HasSuffix(topic, "/status") {
		return // the gateway's retained online/offline
	}
	p, err := packet.Decode(payload)
	l.mu.Lock()
	defer l.mu.Unlock()
	if err != nil {
		l.problemLocked("broker %c, topic %s: %v: %.200s", 'A'+i, topic, err, payload)
		return
	}
	if err := testtool.CheckPacket(payload); err != nil {
		l.problemLocked("broker %c, topic %s: not as docs/schema/packet.schema.json says: %v: %.200s", 'A'+i, topic, err, payload)
	}
	if p.GatewayID != l.gatewayID {
		l.problemLocked("broker %c: seq %d from gateway %q", 'A'+i, p.Seq, p.GatewayID)
	}
	k := key{p.Epoch, p.Seq}
	sum := checksum(payload)
	r := l.recv[k]
	if r == nil {
		r = &receipt{first: at, sum: sum}
		l.recv[k] = r
		if pr, ok := l.printed[k]; ok && pr.sum != sum {
			l.problemLocked("seq %v: the packet broker %c delivered differs from the one the gateway stored", k, 'A'+i)
		}
	} else if r.sum != sum {
		l.problemLocked("seq %v: two different packets delivered under one seq (broker %c)", k, 'A'+i)
	}
	r.count++
	r.brokers |= 1 << i
	l.perBrok[i]++
}

// undelivered returns the produced packets printed before by that no
// subscriber has received yet.
func (l *ledger) undelivered(by time.Time) []key {
	l.mu.Lock()
	defer l.mu.Unlock()
	var out []key
	for k, p := range l.printed {
		if p.at.After(by) {
			continue
		}
		if l.recv[k] == nil {
			out = append(out, k)
		}
	}
	sortKeys(out)
	return out
}

func (l *ledger) produced() int {
	l.mu.Lock()
	defer l.mu.Unlock()
	return len(l.printed)
}

// firstReceivedIn counts the packets first received in [from, to].
func (l *ledger) firstReceivedIn(from, to time.Time) int {
	l.mu.Lock()
	defer l.mu.Unlock()
	n := 0
	for _, r := range l.recv {
		if !r.first.Before(from) && !r.first.After(to) {
			n++
		}
	}
	return n
}

func sortKeys(ks []key) {
	sort.Slice(ks, func(i, j int) bool {
		if ks[i].epoch != ks[j].epoch {
			return ks[i].epoch < ks[j].epoch
		}
		return ks[i].seq < ks[j].seq
	})
}

// account is the final reckoning, once the gateway has stopped and left
// holds what its buffer still queues.
type account struct {
	produced    int
	delivered   int // produced and received by at least one subscriber
	unconfirmed int // received or left, never printed (committed, print lost to a kill)
	left        int // produced and still in the buffer
	missing     []key
	duplicates  int // receipts beyond the first, over every packet
	refused     int // seqs below the highest that nothing ever showed: appends that did not return
	longest     time.Duration
	longestKey  key
	perBroker   []int
	epochs      int
	phantom     int
	phantoms    []string
	problems    []string
	dupList     []string
}

func (l *ledger) account(left map[key]bool) account {
	l.mu.Lock()
	defer l.mu.Unlock()
	a := account{produced: len(l.printed), perBroker: slices.Clone(l.perBrok), epochs: len(l.epochs), problems: slices.Clone(l.problems),
		phantom: l.phantom, phantoms: slices.Clone(l.phantoms)}
	maxSeq := map[string]uint64{}
	seen := map[key]bool{}
	note := func(k key) {
		seen[k] = true
		maxSeq[k.epoch] = max(maxSeq[k.epoch], k.seq)
	}
	for k, p := range l.printed {
		note(k)
		r := l.recv[k]
		switch {
		case r != nil:
			a.delivered++
			if d := r.first.Sub(p.at); d > a.longest {
				a.longest, a.longestKey = d, k
			}
		case left[k]:
			a.left++
		default:
			a.missing = append(a.missing, k)
		}
	}
	for k, r := range l.recv {
		note(k)
		if _, ok := l.printed[k]; !ok {
			a.unconfirmed++
		}
		if r.count > 1 {
			a.duplicates += r.count - 1
			a.dupList = append(a.dupList, fmt.Sprintf("%d×%d", k.seq, r.count))
		}
	}
	for k := range left {
		note(k)
		if _, ok := l.printed[k]; !ok && l.recv[k] == nil {
			a.unconfirmed++
		}
	}
	for e, m := range maxSeq {
		for s := uint64(1); s <= m; s++ {
			if !seen[key{e, s}] {
				a.refused++
			}
		}
	}
	sortKeys(a.missing)
	slices.Sort(a.dupList)
	return a
}

// printedInfo describes a produced packet for a failure message.
func (l *ledger) printedInfo(k key) string {
	l.mu.Lock()
	defer l.mu.Unlock()
	p := l.printed[k]
	return fmt.Sprintf("seq %v (%s) stored by gateway %d at %s", k, p.device, p.instance, p.at.Format("15:04:05.000"))
}

func (l *ledger) printedAt(k key) time.Time {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.printed[k].at
}
