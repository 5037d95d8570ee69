package metrics

import (
	"io"
	"maps"
	"math"
	"slices"
	"strings"
	"time"

	"fieldlink/selector"
	"fieldlink/sensors"
)

// latencyBounds are selector.LatencyBuckets in seconds.
var latencyBounds = func() []float64 {
	b := make([]float64, len(selector.LatencyBuckets))
	for i, d := range selector.LatencyBuckets {
		b[i] = d.Seconds()
	}
	return b
}()

// Collector turns the snapshots of [Sources] into metrics at scrape time.
type Collector struct {
	src Sources
	now func() time.Time // for the buffer's oldest record age
	d   descs
}

// descs holds every metric the collector can emit.
type descs struct {
	all []*desc // in the order they are written

	devPolls, devErrors, devRequests, devLastDuration, devLastOK, devHealth *desc

	busBusy, busOverruns *desc

	mbRequests, mbResponses, mbErrors, mbSent, mbReceived, mbDiscarded *desc

	bufRecords, bufLeased, bufBytes, bufMaxBytes, bufFileSize, bufOldestAge *desc
	bufAppends, bufAcks, bufCommits, bufFsyncs                              *desc
	bufEvictions, bufRejected, bufCorrupt, bufSalvages, bufSalvageLost      *desc
	bufLostUncommitted, bufCompactions                                      *desc
	bufDeadLetters, bufDeadDropped, bufDeadRecords, bufDeadBytes            *desc
	bufDurable, bufVolatile                                                 *desc

	delRetries, delReleased, delDeadLettered, delInFlight *desc

	upPicks, upDelivered                              *desc
	upFailures, upTimeouts, upConsecutive, upInFlight *desc
	upUp, upRetired                                   *desc
	upLatency, upEWMA, upPeakEWMA, upStdDev           *desc
	upProbeRTT, upProbeAge, upProbeFailures           *desc
	selectorInfo, selectorFallbacks                   *desc
	commands                                          *desc
	remoteSerial, remoteState                         *desc
	reading, heldBack                                 *desc
}

// add makes the description of one metric. It is not inlined: newDescs
// calls it for every metric, once at start, and an inlined copy in each call
// cost the ARM field binary about 35 KB.
//
//go:noinline
func (d *descs) add(name string, help string, labels ...string) *desc {
	typ := gaugeType
	if strings.HasSuffix(name, "_total") {
		typ = counterType
	}
	dd := &desc{name: "fieldlink_" + name, help: help, typ: typ, labels: labels}
	d.all = append(d.all, dd)
	return dd
}

func newDescs() descs {
	var d descs
	dev := []string{"bus", "device"}
	d.devPolls = d.add("device_polls_total", "Polls of the device, successful or not.", dev...)
	d.devErrors = d.add("device_poll_errors_total", "Polls of the device that failed.", dev...)
	d.devRequests = d.add("device_requests_total", "Read requests sent to the device.", dev...)
	d.devLastDuration = d.add("device_last_poll_duration_seconds", "How long the device's latest poll took.", dev...)
	d.devLastOK = d.add("device_last_success_timestamp_seconds", "Unix time of the device's latest successful poll, 0 if none.", dev...)
	d.devHealth = d.add("device_health", "Health of the device: 1 for its current state (unknown, ok, degraded, offline), 0 for the others.", "bus", "device", "state")

	d.busBusy = d.add("bus_busy_seconds_total", "Time the bus spent polling; its rate is the bus's utilisation, 0 to 1.", "bus")
	d.busOverruns = d.add("bus_overruns_total", "Scheduled polls skipped because the bus ran late.", "bus")

	d.mbRequests = d.add("modbus_requests_total", "Modbus requests written to the bus.", "bus")
	d.mbResponses = d.add("modbus_responses_total", "Well-formed Modbus replies, data or exception.", "bus")
	d.mbErrors = d.add("modbus_errors_total", "Failed Modbus exchanges by kind: timeout, crc, exception, frame (short or unexpected reply), io (the link failed).", "bus", "kind")
	d.mbSent = d.add("modbus_sent_bytes_total", "Bytes written to the bus, framing included.", "bus")
	d.mbReceived = d.add("modbus_received_bytes_total", "Bytes read from the bus, discarded ones included.", "bus")
	d.mbDiscarded = d.add("modbus_discarded_bytes_total", "Bytes read from the bus and thrown away: stale input or stale replies.", "bus")

	d.bufRecords = d.add("buffer_records", "Records stored in the buffer, by queue (kind alarm or normal).", "kind")
	d.bufDurable = d.add("buffer_durable", "1 while packets are stored on the card before they count as taken (reason ok, or slow: the card's writes take 2 s or more), 0 while they go upstream from a volatile buffer in memory (reason io_error, read_only or full).", "reason")
	d.bufVolatile = d.add("buffer_volatile_records", "Packets held in the volatile buffer in memory, lost by a power cut: live readings kept while the card cannot store them.")
	d.bufLeased = d.add("buffer_leased_records", "Records handed to the delivery loop and not yet acknowledged or released.")
	d.bufBytes = d.add("buffer_bytes", "Bytes of the records stored, as the max_bytes bound counts them.")
	d.bufMaxBytes = d.add("buffer_max_bytes", "The max_bytes bound of the buffer.")
	d.bufFileSize = d.add("buffer_file_size_bytes", "Size of the buffer file on disk.")
	d.bufOldestAge = d.add("buffer_oldest_record_age_seconds", "Age of the reading of the oldest stored record, 0 when the buffer is empty.")
	d.bufAppends = d.add("buffer_appends_total", "Records appended to the buffer since it was opened.")
	d.bufAcks = d.add("buffer_acks_total", "Records acknowledged (deleted after delivery) since the buffer was opened.")
	d.bufCommits = d.add("buffer_commits_total", "Write transactions committed since the buffer was opened.")
	d.bufFsyncs = d.add("buffer_fsyncs_total", "Fsyncs of the buffer file since it was opened.")
	d.bufEvictions = d.add("buffer_evictions_total", "Records evicted by the buffer's policy, by reason (max_bytes, max_age), since the file was created.", "reason")
	d.bufRejected = d.add("buffer_rejected_total", "Appends refused because the buffer was full, since the file was created.")
	d.bufCorrupt = d.add("buffer_corrupt_records_total", "Records that failed their checksum on read and were deleted, since the file was created.")
	d.bufSalvages = d.add("buffer_salvages_total", "Corrupt buffer files moved aside and salvaged, since the file was created.")
	d.bufSalvageLost = d.add("buffer_salvage_lost_records_total", "Records a salvage could not recover (an estimate), since the file was created.")
	d.bufLostUncommitted = d.add("buffer_lost_uncommitted_records_total", "Appends acknowledged under interval durability and then lost to a failed commit, since the file was created.")
	d.bufCompactions = d.add("buffer_compactions_total", "Compactions of the buffer file, since it was created.")
	d.bufDeadLetters = d.add("buffer_dead_letters_total", "Records moved to the dead-letter store, since the file was created.")
	d.bufDeadDropped = d.add("buffer_dead_letters_dropped_total", "Dead letters dropped beyond the dead-letter bound or by a salvage, since the file was created.")
	d.bufDeadRecords = d.add("buffer_dead_letter_records", "Dead letters stored.")
	d.bufDeadBytes = d.add("buffer_dead_letter_bytes", "Bytes of the dead letters stored.")

	d.delRetries = d.add("delivery_retries_total", "Batches tried again on another upstream after a failure.")
	d.delReleased = d.add("delivery_released_records_total", "Records returned to the buffer undelivered after every attempt failed.")
	d.delDeadLettered = d.add("delivery_dead_lettered_records_total", "Records an upstream refused for good, dead-lettered.")
	d.delInFlight = d.add("delivery_in_flight_batches", "Batches being delivered.")

	up := "upstream"
	d.upPicks = d.add("upstream_picks_total", "Times the selector picked the upstream for a batch, retries included.", up)
	d.upDelivered = d.add("upstream_delivered_records_total", "Records the upstream acknowledged.", up)
	d.upFailures = d.add("upstream_failures_total", "Deliveries to the upstream that failed, timeouts included.", up)
	d.upTimeouts = d.add("upstream_timeouts_total", "Deliveries to the upstream that timed out.", up)
	d.upConsecutive = d.add("upstream_consecutive_failures", "Failed deliveries to the upstream since its last success.", up)
	d.upInFlight = d.add("upstream_in_flight_batches", "Deliveries to the upstream begun and not ended.", up)
	d.upUp = d.add("upstream_up", "1 when the upstream can be tried (connected, or its latest probe answered), else 0.", up)
	d.upRetired = d.add("upstream_retired", "1 when the upstream was removed from the selection for good, else 0.", up)
	d.upLatency = d.add("upstream_latency_seconds", "Delivery latency, send to acknowledgement, failures included.", up)
	d.upLatency.typ = histogramType
	d.upEWMA = d.add("upstream_latency_ewma_seconds", "Exponentially weighted moving average of the upstream's delivery latency.", up)
	d.upPeakEWMA = d.add("upstream_latency_peak_ewma_seconds", "Peak EWMA cost of the upstream (p2c_ewma), decayed to now.", up)
	d.upStdDev = d.add("upstream_latency_stddev_seconds", "Standard deviation of the upstream's latest delivery latencies.", up)
	d.upProbeRTT = d.add("upstream_probe_rtt_seconds", "Round-trip time of the upstream's latest successful probe.", up)
	d.upProbeAge = d.add("upstream_probe_age_seconds", "Time since the upstream's latest successful probe.", up)
	d.upProbeFailures = d.add("upstream_probe_failures_total", "Probes of the upstream that failed.", up)
	d.selectorInfo = d.add("selector_info", "The selection strategy in use, in the selector label; always 1.", "selector")
	d.selectorFallbacks = d.add("selector_fallbacks_total", "Picks the strategy made by its fallback (least_conn) because no fresh server load report existed.", "selector")
	d.commands = d.add("commands_total", "Downlink commands by outcome: done, rejected, expired, failed, unknown_outcome.", "status")
	d.remoteSerial = d.add("remote_config_serial", "Serial of the bundle the remote configuration last reported on.")
	d.remoteState = d.add("remote_config_state", "The remote configuration's last report: 1 for its state (applied, probation, reverted, refused).", "state")
	d.reading = d.add("reading", "The point's latest good reading, in its unit (a boolean as 1 or 0); a point that is stale, bad or not a number has no series.", "device", "point", "unit")
	d.heldBack = d.add("packets_held_back_total", "Polled packets report by exception kept from the buffer: no point beyond its deadband, no heartbeat due, no alarm.")
	return d
}

// NewCollector returns a collector that reads src at every scrape.
func NewCollector(src Sources) *Collector {
	return &Collector{src: src, now: time.Now, d: newDescs()}
}

// Write reads the sources once and writes their metrics to w in the text
// exposition format. A series it cannot write (a label value that is not
// UTF-8) is left out and reported in the error; the others are written.
func (c *Collector) Write(w io.Writer) error {
	s := newScrape()
	c.collect(s)
	return s.write(w, c.d.all)
}

func (c *Collector) collect(ch *scrape) {
	c.collectDevices(ch)
	c.collectBuses(ch)
	c.collectModbus(ch)
	c.collectBuffer(ch)
	c.collectDelivery(ch)
	c.collectUpstreams(ch)
	c.collectReadings(ch)
	if c.src.HeldBack != nil {
		counter(ch, c.d.heldBack, float64(c.src.HeldBack()))
	}
	if c.src.Remote != nil {
		if r := c.src.Remote(); r != nil {
			gauge(ch, c.d.remoteSerial, float64(r.Serial))
			for _, st := range []string{"applied", "probation", "reverted", "refused"} {
				gauge(ch, c.d.remoteState, boolFloat(r.State == st), st)
			}
		}
	}
	if c.src.Commands != nil {
		byStatus := c.src.Commands()
		for _, status := range slices.Sorted(maps.Keys(byStatus)) {
			counter(ch, c.d.commands, float64(byStatus[status]), status)
		}
	}
	if c.src.Selector != nil {
		if name := c.src.Selector(); name != "" {
			gauge(ch, c.d.selectorInfo, 1, name)
			if c.src.SelectorFallbacks != nil {
				counter(ch, c.d.selectorFallbacks, float64(c.src.SelectorFallbacks()), name)
			}
		}
	}
}

func (c *Collector) collectDevices(ch *scrape) {
	if c.src.Devices == nil {
		return
	}
	d := &c.d
	for _, s := range c.src.Devices() {
		counter(ch, d.devPolls, float64(s.Polls), s.Bus, s.Name)
		counter(ch, d.devErrors, float64(s.Errors), s.Bus, s.Name)
		counter(ch, d.devRequests, float64(s.Requests), s.Bus, s.Name)
		gauge(ch, d.devLastDuration, s.LastDuration.Seconds(), s.Bus, s.Name)
		gauge(ch, d.devLastOK, unixSeconds(s.LastOK), s.Bus, s.Name)
		for h := sensors.Unknown; h <= sensors.Offline; h++ {
			gauge(ch, d.devHealth, boolFloat(s.Health == h), s.Bus, s.Name, h.String())
		}
	}
}

// collectReadings writes the good numeric points. A point that is not
// good has no series rather than a 0, which a graph would take for a
// reading.
func (c *Collector) collectReadings(ch *scrape) {
	if c.src.Readings == nil {
		return
	}
	for _, p := range c.src.Readings(c.now()) {
		if p.Quality != sensors.Good {
			continue
		}
		v, ok := p.Value.Float64()
		if !ok || math.IsNaN(v) {
			continue
		}
		gauge(ch, c.d.reading, v, p.Device, p.Name, p.Unit)
	}
}

func (c *Collector) collectBuses(ch *scrape) {
	if c.src.Buses == nil {
		return
	}
	for _, b := range c.src.Buses() {
		counter(ch, c.d.busBusy, b.Busy.Seconds(), b.Name)
		counter(ch, c.d.busOverruns, float64(b.Overruns), b.Name)
	}
}

func (c *Collector) collectModbus(ch *scrape) {
	if c.src.Modbus == nil {
		return
	}
	d := &c.d
	for bus, s := range c.src.Modbus() {
		counter(ch, d.mbRequests, float64(s.Requests), bus)
		counter(ch, d.mbResponses, float64(s.Responses), bus)
		counter(ch, d.mbErrors, float64(s.Timeouts), bus, "timeout")
		counter(ch, d.mbErrors, float64(s.CRCErrors), bus, "crc")
		counter(ch, d.mbErrors, float64(s.Exceptions), bus, "exception")
		counter(ch, d.mbErrors, float64(s.FrameErrors), bus, "frame")
		counter(ch, d.mbErrors, float64(s.IOErrors), bus, "io")
		counter(ch, d.mbSent, float64(s.BytesSent), bus)
		counter(ch, d.mbReceived, float64(s.BytesReceived), bus)
		counter(ch, d.mbDiscarded, float64(s.Discarded), bus)
	}
}

func (c *Collector) collectBuffer(ch *scrape) {
	if c.src.Durability != nil {
		s := c.src.Durability()
		v := 0.0
		if s.Durable {
			v = 1
		}
		gauge(ch, c.d.bufDurable, v, s.Reason)
		gauge(ch, c.d.bufVolatile, float64(s.Volatile))
	}
	if c.src.Buffer == nil {
		return
	}
	s, ok := c.src.Buffer()
	if !ok {
		return
	}
	d := &c.d
	gauge(ch, d.bufRecords, float64(s.Alarms), "alarm")
	gauge(ch, d.bufRecords, float64(s.Normal), "normal")
	gauge(ch, d.bufLeased, float64(s.Leased))
	gauge(ch, d.bufBytes, float64(s.Bytes))
	gauge(ch, d.bufMaxBytes, float64(s.MaxBytes))
	gauge(ch, d.bufFileSize, float64(s.FileSize))
	age := 0.0
	if s.OldestSeq != 0 && !s.OldestAt.IsZero() {
		age = max(c.now().Sub(s.OldestAt).Seconds(), 0)
	}
	gauge(ch, d.bufOldestAge, age)
	counter(ch, d.bufAppends, float64(s.Appends))
	counter(ch, d.bufAcks, float64(s.Acks))
	counter(ch, d.bufCommits, float64(s.Commits))
	counter(ch, d.bufFsyncs, float64(s.Fsyncs))
	counter(ch, d.bufEvictions, float64(s.EvictedMaxBytes), "max_bytes")
	counter(ch, d.bufEvictions, float64(s.EvictedMaxAge), "max_age")
	counter(ch, d.bufRejected, float64(s.RejectedFull))
	counter(ch, d.bufCorrupt, float64(s.Corrupt))
	counter(ch, d.bufSalvages, float64(s.Salvages))
	counter(ch, d.bufSalvageLost, float64(s.SalvageLost))
	counter(ch, d.bufLostUncommitted, float64(s.LostUncommitted))
	counter(ch, d.bufCompactions, float64(s.Compactions))
	counter(ch, d.bufDeadLetters, float64(s.DeadLetters))
	counter(ch, d.bufDeadDropped, float64(s.DeadDropped))
	gauge(ch, d.bufDeadRecords, float64(s.DeadDepth))
	gauge(ch, d.bufDeadBytes, float64(s.DeadBytes))
}

func (c *Collector) collectDelivery(ch *scrape) {
	if c.src.Delivery == nil {
		return
	}
	s, ok := c.src.Delivery()
	if !ok {
		return
	}
	d := &c.d
	counter(ch, d.delRetries, float64(s.Retried))
	counter(ch, d.delReleased, float64(s.Released))
	counter(ch, d.delDeadLettered, float64(s.DeadLettered))
	gauge(ch, d.delInFlight, float64(s.InFlight))
	for _, u := range s.Upstreams {
		counter(ch, d.upPicks, float64(u.Picked), u.Name)
		counter(ch, d.upDelivered, float64(u.Delivered), u.Name)
	}
}

func (c *Collector) collectUpstreams(ch *scrape) {
	if c.src.Upstreams == nil {
		return
	}
	d := &c.d
	for _, s := range c.src.Upstreams() {
		counter(ch, d.upFailures, float64(s.Failures), s.Name)
		counter(ch, d.upTimeouts, float64(s.Timeouts), s.Name)
		gauge(ch, d.upConsecutive, float64(s.ConsecutiveFailures), s.Name)
		gauge(ch, d.upInFlight, float64(s.InFlight), s.Name)
		gauge(ch, d.upUp, boolFloat(s.Up), s.Name)
		gauge(ch, d.upRetired, boolFloat(s.Retired), s.Name)
		counter(ch, d.upProbeFailures, float64(s.ProbeFailures), s.Name)

		ch.add(d.upLatency, sample{labels: []string{s.Name}, value: s.LatencySum.Seconds(), count: s.LifetimeSamples,
			bounds: latencyBounds, cum: s.LatencyCumulative[:]})
		if s.LifetimeSamples > 0 {
			gauge(ch, d.upEWMA, s.LatencyEWMA.Seconds(), s.Name)
		}
		if s.PeakEWMA > 0 {
			gauge(ch, d.upPeakEWMA, s.PeakEWMA.Seconds(), s.Name)
		}
		if s.Samples > 0 {
			gauge(ch, d.upStdDev, s.LatencyStdDev.Seconds(), s.Name)
		}
		if s.ProbeRTT > 0 {
			gauge(ch, d.upProbeRTT, s.ProbeRTT.Seconds(), s.Name)
			gauge(ch, d.upProbeAge, s.ProbeAge.Seconds(), s.Name)
		}
	}
}

func counter(ch *scrape, d *desc, v float64, labels ...string) {
	ch.add(d, sample{labels: labels, value: v})
}

func gauge(ch *scrape, d *desc, v float64, labels ...string) {
	ch.add(d, sample{labels: labels, value: v})
}

func boolFloat(b bool) float64 {
	if b {
		return 1
	}
	return 0
}

// unixSeconds is t in Unix seconds, 0 for the zero time.
func unixSeconds(t time.Time) float64 {
	if t.IsZero() {
		return 0
	}
	return float64(t.UnixNano()) / 1e9
}
