package sparkplug

import (
	"math"
	"slices"
	"strconv"
	"strings"

	paho "github.com/eclipse/paho.mqtt.golang"

	"fieldlink/packet"
	spb "fieldlink/sparkplug"
	"fieldlink/uplink/mqtt"
)

// ddata hands pk's DDATA to paho and returns its token; nil when pk is no
// reading of d (a command's record, say: nothing a host could read). A
// reading made before the primary host came online, or of a device that
// is dead now, is historical, and does not become the metrics' current
// value. s.mu is held.
func (s *session) ddata(l *mqtt.Link, d *device, pk *packet.Packet) paho.Token {
	if !isReading(d, pk) {
		return nil
	}
	p := spb.Payload{Timestamp: s.stamp()}
	at := uint64(pk.At.UnixMilli())
	// Packets carry whole seconds: a reading of the second the host came
	// online, made after it, counts as historical too. That errs the safe
	// way: it is still stored by the host, and the next reading updates
	// the live value, whereas a kept reading taken for live would put an
	// old value in its place.
	hist := d.dead || s.cfg.PrimaryHost != "" && pk.At.Before(s.hostSince)
	// A reading timed by a clock not in step is stale: its value is
	// the device's, its time is not known.
	q := int32(qualityGood)
	if pk.ClockUnsynced {
		q = qualityStale
	}
	seen := make([]bool, len(d.metrics))
	for _, f := range pk.Fields {
		i, ok := d.byName[f.Name]
		if !ok {
			continue // not in the birth: a host could not read it
		}
		seen[i] = true
		v, ok := valueOf(d.metrics[i].Type, f.Value)
		p.Metrics = s.appendReading(p.Metrics, d, i, at, v, ok, q, slices.Contains(pk.AlarmFields, f.Name), hist)
	}
	for i, was := range seen {
		if !was { // the reading has no value for it: failed, never a stale value
			p.Metrics = s.appendReading(p.Metrics, d, i, at, spb.Value{}, false, q, false, hist)
		}
	}
	epoch := spb.Metric{Alias: d.epochAlias, HasAlias: true, Timestamp: at, Type: spb.String, Value: spb.StringOf(pk.Epoch), Historical: hist}
	if pk.Epoch == "" {
		epoch.Null, epoch.Value = true, spb.Value{}
	}
	p.Metrics = append(p.Metrics,
		spb.Metric{Alias: d.seqAlias, HasAlias: true, Timestamp: at, Type: spb.UInt64, Value: spb.Int(spb.UInt64, int64(pk.Seq)), Historical: hist},
		epoch)
	p.HasSeq, p.Seq = true, s.nextSeq()
	return l.Client().Publish(spb.Topic(s.cfg.GroupID, spb.DDATA, s.cfg.EdgeNode, d.name), dataQoS, false, p.Marshal())
}

// appendReading appends metric i of d as a reading has it, and its alarm
// metric if it has one: value v, or is_null with quality bad when ok is
// false; with quality q otherwise. A metric's Quality property goes out
// when it is not good, and when a host last read another quality for it.
// A live reading becomes the metric's last value (for the next DBIRTH);
// a historical one does not. s.mu is held.
func (s *session) appendReading(ms []spb.Metric, d *device, i int, at uint64, v spb.Value, ok bool, q int32, alarm, hist bool) []spb.Metric {
	m := spb.Metric{Alias: d.alias[i], HasAlias: true, Timestamp: at, Type: d.metrics[i].Type, Value: v, Historical: hist}
	var av spb.Value
	if ok {
		av = spb.BoolOf(alarm)
	} else {
		m.Value, m.Null, q = spb.Value{}, true, qualityBad
	}
	was, wasAlarm := d.sentQ[i], d.sentAlarmQ[i]
	if hist { // its quality is its own; the live one stays as sent
		was, wasAlarm = qualityGood, qualityGood
	}
	sent := setQuality(&m, q, was)
	ms = append(ms, m)
	if !hist {
		d.last[i], d.lastAt[i], d.lastQ[i], d.sentQ[i] = m.Value, at, q, sent
	}
	if d.alarm[i] == 0 {
		return ms
	}
	am := spb.Metric{Alias: d.alarm[i], HasAlias: true, Timestamp: at, Type: spb.Boolean, Value: av, Null: !ok, Historical: hist}
	sent = setQuality(&am, q, wasAlarm)
	if !hist {
		d.lastAlarm[i], d.sentAlarmQ[i] = av, sent
	}
	return append(ms, am)
}

// setQuality gives m a Quality property of q when q is not good or the
// host last read quality was for it, and returns q.
func setQuality(m *spb.Metric, q, was int32) int32 {
	if q == qualityGood && was == qualityGood {
		return q
	}
	if m.Properties == nil {
		m.Properties = &spb.PropertySet{}
	}
	m.Properties.Add("Quality", spb.PropertyValue{Type: spb.Int32, Value: spb.Int(spb.Int32, int64(q))})
	return q
}

// isReading reports whether pk is a reading of d: one of its fields is a
// metric of d. Other records of the device (a command's, say) leave the
// buffer unsent: they are no metric a host could read.
func isReading(d *device, pk *packet.Packet) bool {
	for _, f := range pk.Fields {
		if _, ok := d.byName[f.Name]; ok {
			return true
		}
	}
	return false
}

// valueOf converts a packet's value to datatype t; ok is false when it
// has none (NaN, written as null) or cannot be read as t.
func valueOf(t spb.DataType, v packet.Value) (spb.Value, bool) {
	text := v.String()
	switch t {
	case spb.Boolean:
		switch strings.ToLower(text) {
		case "true", "1":
			return spb.BoolOf(true), true
		case "false", "0":
			return spb.BoolOf(false), true
		}
	case spb.String, spb.Text:
		return spb.StringOf(text), true
	case spb.Float, spb.Double:
		f, err := strconv.ParseFloat(text, 64)
		if err != nil || math.IsNaN(f) || math.IsInf(f, 0) {
			return spb.Value{}, false
		}
		if t == spb.Float {
			return spb.FloatOf(float32(f)), true
		}
		return spb.DoubleOf(f), true
	case spb.UInt8, spb.UInt16, spb.UInt32, spb.UInt64:
		n, err := strconv.ParseUint(text, 10, 64)
		if err == nil {
			return spb.Value{Kind: kindOf(t), Num: n}, true
		}
	case spb.Int8, spb.Int16, spb.Int32, spb.Int64:
		n, err := strconv.ParseInt(text, 10, 64)
		if err == nil {
			return spb.Int(t, n), true
		}
	}
	return spb.Value{}, false
}

func kindOf(t spb.DataType) spb.Kind {
	if t == spb.UInt8 || t == spb.UInt16 {
		return spb.IntValue
	}
	return spb.LongValue
}
