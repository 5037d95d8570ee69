package emulator

// SlaveStats counts what one emulated slave did.
type SlaveStats struct {
	Requests     uint64 // well-formed requests addressed to the slave
	Replies      uint64 // replies sent, exceptions and corrupted ones included
	Dropped      uint64 // requests left unanswered by the Drop or DropWriteReplies fault
	CRCCorrupted uint64 // replies sent with a deliberately wrong CRC
	Exceptions   uint64 // exception replies of any code
	Writes       uint64 // writes executed (values stored), broadcasts included
}

// Stats is a snapshot of an Emulator's counters.
type Stats struct {
	Slaves map[byte]SlaveStats
	// Ignored counts requests for a slave id not emulated, and broadcasts:
	// a real slave stays silent to both.
	Ignored uint64
	// Garbage counts RTU input discarded: bad CRC, incomplete frames, noise.
	Garbage uint64
}

// Stats returns a snapshot of the counters.
func (e *Emulator) Stats() Stats {
	e.mu.Lock()
	defer e.mu.Unlock()
	s := Stats{Slaves: make(map[byte]SlaveStats, len(e.devs)), Ignored: e.ignored, Garbage: e.garbage}
	for id, d := range e.devs {
		s.Slaves[id] = d.stats
	}
	return s
}
