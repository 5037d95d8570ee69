package cardstore

import (
	"fieldlink/buffer"
	"fieldlink/metrics"
)

// The store's families: the card's buffer ([buffer.Stats]) and whether the
// store keeps packets on the card ([State]). They are the buffer_ families
// of one store, so one collector writes them, in one order.
var (
	bufRecords         = metrics.NewGauge("fieldlink_buffer_records", "Records stored in the buffer, by queue (kind alarm or normal).", "kind")
	bufDurable         = metrics.NewGauge("fieldlink_buffer_durable", "1 while packets are stored on the card before they count as taken (reason ok, or slow: the card's writes take 2 s or more), 0 while they go upstream from a volatile buffer in memory (reason io_error, read_only or full).", "reason")
	bufVolatile        = metrics.NewGauge("fieldlink_buffer_volatile_records", "Packets held in the volatile buffer in memory, lost by a power cut: live readings kept while the card cannot store them.")
	bufLeased          = metrics.NewGauge("fieldlink_buffer_leased_records", "Records handed to the delivery loop and not yet acknowledged or released.")
	bufBytes           = metrics.NewGauge("fieldlink_buffer_bytes", "Bytes of the records stored, as the max_bytes bound counts them.")
	bufMaxBytes        = metrics.NewGauge("fieldlink_buffer_max_bytes", "The max_bytes bound of the buffer.")
	bufFileSize        = metrics.NewGauge("fieldlink_buffer_file_size_bytes", "Size of the buffer file on disk.")
	bufOldestAge       = metrics.NewGauge("fieldlink_buffer_oldest_record_age_seconds", "Age of the reading of the oldest stored record, 0 when the buffer is empty.")
	bufAppends         = metrics.NewCounter("fieldlink_buffer_appends_total", "Records appended to the buffer since it was opened.")
	bufAcks            = metrics.NewCounter("fieldlink_buffer_acks_total", "Records acknowledged (deleted after delivery) since the buffer was opened.")
	bufCommits         = metrics.NewCounter("fieldlink_buffer_commits_total", "Write transactions committed since the buffer was opened.")
	bufFsyncs          = metrics.NewCounter("fieldlink_buffer_fsyncs_total", "Fsyncs of the buffer file since it was opened.")
	bufEvictions       = metrics.NewCounter("fieldlink_buffer_evictions_total", "Records evicted by the buffer's policy, by reason (max_bytes, max_age), since the file was created.", "reason")
	bufRejected        = metrics.NewCounter("fieldlink_buffer_rejected_total", "Appends refused because the buffer was full, since the file was created.")
	bufCorrupt         = metrics.NewCounter("fieldlink_buffer_corrupt_records_total", "Records that failed their checksum on read and were deleted, since the file was created.")
	bufSalvages        = metrics.NewCounter("fieldlink_buffer_salvages_total", "Corrupt buffer files moved aside and salvaged, since the file was created.")
	bufSalvageLost     = metrics.NewCounter("fieldlink_buffer_salvage_lost_records_total", "Records a salvage could not recover (an estimate), since the file was created.")
	bufLostUncommitted = metrics.NewCounter("fieldlink_buffer_lost_uncommitted_records_total", "Appends acknowledged under interval durability and then lost to a failed commit, since the file was created.")
	bufCompactions     = metrics.NewCounter("fieldlink_buffer_compactions_total", "Compactions of the buffer file, since it was created.")
	bufDeadLetters     = metrics.NewCounter("fieldlink_buffer_dead_letters_total", "Records moved to the dead-letter store, since the file was created.")
	bufDeadDropped     = metrics.NewCounter("fieldlink_buffer_dead_letters_dropped_total", "Dead letters dropped beyond the dead-letter bound or by a salvage, since the file was created.")
	bufDeadRecords     = metrics.NewGauge("fieldlink_buffer_dead_letter_records", "Dead letters stored.")
	bufDeadBytes       = metrics.NewGauge("fieldlink_buffer_dead_letter_bytes", "Bytes of the dead letters stored.")

	metricFamilies = []*metrics.Desc{bufRecords, bufDurable, bufVolatile, bufLeased, bufBytes, bufMaxBytes, bufFileSize, bufOldestAge,
		bufAppends, bufAcks, bufCommits, bufFsyncs, bufEvictions, bufRejected, bufCorrupt, bufSalvages, bufSalvageLost,
		bufLostUncommitted, bufCompactions, bufDeadLetters, bufDeadDropped, bufDeadRecords, bufDeadBytes}
)

// Metrics are the store's metrics: [Store.Stats] and [Store.State] as
// fieldlink_buffer_*. A nil function leaves its families out, and so does
// Stats when it says the site has no buffer.
type Metrics struct {
	Stats func() (buffer.Stats, bool)
	State func() State
}

// Families implements [metrics.Collector].
func (Metrics) Families() []*metrics.Desc { return metricFamilies }

// Collect implements [metrics.Collector].
func (m Metrics) Collect(s *metrics.Scrape) {
	if m.State != nil {
		st := m.State()
		s.Add(bufDurable, metrics.Bool(st.Durable), string(st.Fault))
		s.Add(bufVolatile, float64(st.Volatile))
	}
	if m.Stats == nil {
		return
	}
	st, ok := m.Stats()
	if !ok {
		return
	}
	s.Add(bufRecords, float64(st.Alarms), "alarm")
	s.Add(bufRecords, float64(st.Normal), "normal")
	s.Add(bufLeased, float64(st.Leased))
	s.Add(bufBytes, float64(st.Bytes))
	s.Add(bufMaxBytes, float64(st.MaxBytes))
	s.Add(bufFileSize, float64(st.FileSize))
	age := 0.0
	if st.OldestSeq != 0 && !st.OldestAt.IsZero() {
		age = max(s.Now().Sub(st.OldestAt).Seconds(), 0)
	}
	s.Add(bufOldestAge, age)
	s.Add(bufAppends, float64(st.Appends))
	s.Add(bufAcks, float64(st.Acks))
	s.Add(bufCommits, float64(st.Commits))
	s.Add(bufFsyncs, float64(st.Fsyncs))
	s.Add(bufEvictions, float64(st.EvictedMaxBytes), "max_bytes")
	s.Add(bufEvictions, float64(st.EvictedMaxAge), "max_age")
	s.Add(bufRejected, float64(st.RejectedFull))
	s.Add(bufCorrupt, float64(st.Corrupt))
	s.Add(bufSalvages, float64(st.Salvages))
	s.Add(bufSalvageLost, float64(st.SalvageLost))
	s.Add(bufLostUncommitted, float64(st.LostUncommitted))
	s.Add(bufCompactions, float64(st.Compactions))
	s.Add(bufDeadLetters, float64(st.DeadLetters))
	s.Add(bufDeadDropped, float64(st.DeadDropped))
	s.Add(bufDeadRecords, float64(st.DeadDepth))
	s.Add(bufDeadBytes, float64(st.DeadBytes))
}
