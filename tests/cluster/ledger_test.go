//go:build cluster

package cluster

import (
	"fmt"
	"strings"
	"sync"
	"time"

	"fieldlink/packet"
)

// key names one packet: the gateway, its buffer's epoch and the Seq.
type key struct {
	gateway, epoch string
	seq            uint64
}

// receipt is what the subscriber got of one packet.
type receipt struct {
	first time.Time
	count int
}

// ledger records what the gateway stored (printed) and what the platform's
// subscriber received. It is safe for concurrent use.
type ledger struct {
	mu         sync.Mutex
	printed    map[key]time.Time
	recv       map[key]*receipt
	arrivals   []time.Time       // every receipt, in order
	maxSeq     map[string]uint64 // highest Seq received, by epoch
	outOfOrder int               // receipts of a Seq below one received before (the gateway publishes on three connections at once)
	connects   int               // subscriber connections made
	left       map[key]bool      // in the gateway's buffer when it stopped, for its next start
	problems   []string
}

func newLedger() *ledger {
	return &ledger{printed: map[key]time.Time{}, recv: map[key]*receipt{}, maxSeq: map[string]uint64{}, left: map[key]bool{}}
}

func (l *ledger) problemLocked(format string, args ...any) {
	if len(l.problems) < 50 {
		l.problems = append(l.problems, fmt.Sprintf(format, args...))
	}
}

// stored takes one line the gateway printed.
func (l *ledger) stored(line []byte, at time.Time) {
	p, err := packet.Decode(line)
	if err != nil {
		l.mu.Lock()
		l.problemLocked("gateway stdout: %v: %.200s", err, line)
		l.mu.Unlock()
		return
	}
	l.storedPacket(p, at)
}

// storedPacket takes one packet a gateway stored.
func (l *ledger) storedPacket(p *packet.Packet, at time.Time) {
	l.mu.Lock()
	defer l.mu.Unlock()
	k := key{p.GatewayID, p.Epoch, p.Seq}
	if p.Epoch == "" || p.Seq == 0 {
		l.problemLocked("gateway stored a packet without epoch or seq: %s %d", p.GatewayID, p.Seq)
		return
	}
	if _, dup := l.printed[k]; dup {
		l.problemLocked("%v printed twice", k)
		return
	}
	l.printed[k] = at
}

// leftInBuffer takes one packet the stopped gateway's buffer still holds
// (a line of gateway buffer export): it waits there for the next start,
// which is not a loss.
func (l *ledger) leftInBuffer(line []byte) {
	p, err := packet.Decode(line)
	l.mu.Lock()
	defer l.mu.Unlock()
	if err != nil {
		l.problemLocked("gateway buffer export: %v: %.200s", err, line)
		return
	}
	k := key{p.GatewayID, p.Epoch, p.Seq}
	if _, ok := l.printed[k]; !ok {
		l.problemLocked("%v is in the buffer at the stop but was never printed", k)
	}
	l.left[k] = true
}

// received takes one message of the subscriber.
func (l *ledger) received(topic string, payload []byte, at time.Time) {
	if strings.HasSuffix(topic, "/status") {
		return // the gateway's retained online/offline
	}
	p, err := packet.Decode(payload)
	l.mu.Lock()
	defer l.mu.Unlock()
	if err != nil {
		l.problemLocked("subscriber: %s: %v: %.200s", topic, err, payload)
		return
	}
	k := key{p.GatewayID, p.Epoch, p.Seq}
	l.arrivals = append(l.arrivals, at)
	if p.Seq < l.maxSeq[p.Epoch] {
		l.outOfOrder++
	} else {
		l.maxSeq[p.Epoch] = p.Seq
	}
	if r := l.recv[k]; r != nil {
		r.count++
		return
	}
	l.recv[k] = &receipt{first: at, count: 1}
}

func (l *ledger) subscriberConnected() {
	l.mu.Lock()
	l.connects++
	l.mu.Unlock()
}

// missing counts the packets stored in (from, to] that the subscriber has
// not received and the stopped gateway's buffer does not hold.
func (l *ledger) missing(from, to time.Time) int {
	l.mu.Lock()
	defer l.mu.Unlock()
	n := 0
	for k, at := range l.printed {
		if at.After(from) && !at.After(to) && l.recv[k] == nil && !l.left[k] {
			n++
		}
	}
	return n
}

// window is what the ledger says of the packets stored in (from, to].
type window struct {
	stored, lost, duplicates int
}

func (l *ledger) window(from, to time.Time) window {
	l.mu.Lock()
	defer l.mu.Unlock()
	var w window
	for k, at := range l.printed {
		if !at.After(from) || at.After(to) {
			continue
		}
		w.stored++
		switch r := l.recv[k]; {
		case r == nil:
			w.lost++
		case r.count > 1:
			w.duplicates += r.count - 1
		}
	}
	return w
}

// firstArrivalAfter is the first receipt after t, if any.
func (l *ledger) firstArrivalAfter(t time.Time) (time.Time, bool) {
	l.mu.Lock()
	defer l.mu.Unlock()
	for _, a := range l.arrivals {
		if a.After(t) {
			return a, true
		}
	}
	return time.Time{}, false
}

// longestSilence is the longest time without a receipt in [from, to].
func (l *ledger) longestSilence(from, to time.Time) time.Duration {
	l.mu.Lock()
	defer l.mu.Unlock()
	prev, longest := from, time.Duration(0)
	for _, a := range l.arrivals {
		if a.Before(from) {
			continue
		}
		if a.After(to) {
			break
		}
		longest = max(longest, a.Sub(prev))
		prev = a
	}
	return max(longest, to.Sub(prev))
}

// totals are the whole run's counts.
type totals struct {
	stored, received, lost, duplicates, outOfOrder, unknown, connects int
	left                                                              int // in the buffer at the stop, not received
	problems                                                          []string
}

func (l *ledger) totals() totals {
	l.mu.Lock()
	defer l.mu.Unlock()
	t := totals{stored: len(l.printed), outOfOrder: l.outOfOrder, connects: l.connects, problems: l.problems}
	for k := range l.printed {
		switch {
		case l.recv[k] != nil:
		case l.left[k]:
			t.left++
		default:
			t.lost++
		}
	}
	for k, r := range l.recv {
		t.received += r.count
		t.duplicates += r.count - 1
		if _, ok := l.printed[k]; !ok {
			t.unknown++
		}
	}
	return t
}

// within is the share of the packets stored in (from, to] that the
// subscriber received within d of their storing: an upper bound of their
// PUBACK's wait, which comes before.
func (l *ledger) within(from, to time.Time, d time.Duration) float64 {
	l.mu.Lock()
	defer l.mu.Unlock()
	n, ok := 0, 0
	for k, at := range l.printed {
		if !at.After(from) || at.After(to) {
			continue
		}
		n++
		if r := l.recv[k]; r != nil && r.first.Sub(at) <= d {
			ok++
		}
	}
	if n == 0 {
		return 0
	}
	return float64(ok) / float64(n)
}
