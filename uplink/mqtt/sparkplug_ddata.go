package mqtt

import (
	"math"
	"slices"
	"strconv"
	"strings"

	paho "github.com/eclipse/paho.mqtt.golang"

	"fieldlink/packet"
	"fieldlink/sparkplug"
)

// ddata hands pk's DDATA to paho and returns its token; nil when pk is no
// reading of d (a command's record, say: nothing a host could read). A
// reading made before the primary host came online, or of a device that
// is dead now, is historical, and does not become the metrics' current
// value. s.mu is held.
func (s *sparkplugSession) ddata(c *mqttConn, d *spDevice, pk *packet.Packet) paho.Token {
	if !spReading(d, pk) {
		return nil
	}
	p := sparkplug.Payload{Timestamp: s.stamp()}
	at := uint64(pk.At.UnixMilli())
	// Packets carry whole seconds: a reading of the second the host came
	// online, made after it, counts as historical too. That errs the safe
	// way: it is still stored by the host, and the next reading updates
	// the live value, whereas a kept reading taken for live would put an
	// old value in its place.
	hist := d.dead || s.cfg.PrimaryHost != "" && pk.At.Before(s.hostSince)
	// A reading timed by a clock not in step is stale: its value is
	// the device's, its time is not known.
	q := int32(sparkplugQualityGood)
	if pk.ClockUnsynced {
		q = sparkplugQualityStale
	}
	seen := make([]bool, len(d.metrics))
	for _, f := range pk.Fields {
		i, ok := d.byName[f.Name]
		if !ok {
			continue // not in the birth: a host could not read it
		}
		seen[i] = true
		v, ok := spValue(d.metrics[i].Type, f.Value)
		p.Metrics = s.appendReading(p.Metrics, d, i, at, v, ok, q, slices.Contains(pk.AlarmFields, f.Name), hist)
	}
	for i, was := range seen {
		if !was { // the reading has no value for it: failed, never a stale value
			p.Metrics = s.appendReading(p.Metrics, d, i, at, sparkplug.Value{}, false, q, false, hist)
		}
	}
	epoch := sparkplug.Metric{Alias: d.epochAlias, HasAlias: true, Timestamp: at, Type: sparkplug.String, Value: sparkplug.StringOf(pk.Epoch), Historical: hist}
	if pk.Epoch == "" {
		epoch.Null, epoch.Value = true, sparkplug.Value{}
	}
	p.Metrics = append(p.Metrics,
		sparkplug.Metric{Alias: d.seqAlias, HasAlias: true, Timestamp: at, Type: sparkplug.UInt64, Value: sparkplug.Int(sparkplug.UInt64, int64(pk.Seq)), Historical: hist},
		epoch)
	p.HasSeq, p.Seq = true, s.nextSeq()
	return c.cl.Publish(sparkplug.Topic(s.cfg.GroupID, sparkplug.DDATA, s.cfg.EdgeNode, d.name), sparkplugQoS, false, p.Marshal())
}

// appendReading appends metric i of d as a reading has it, and its alarm
// metric if it has one: value v, or is_null with quality bad when ok is
// false; with quality q otherwise. A metric's Quality property goes out
// when it is not good, and when a host last read another quality for it.
// A live reading becomes the metric's last value (for the next DBIRTH);
// a historical one does not. s.mu is held.
func (s *sparkplugSession) appendReading(ms []sparkplug.Metric, d *spDevice, i int, at uint64, v sparkplug.Value, ok bool, q int32, alarm, hist bool) []sparkplug.Metric {
	m := sparkplug.Metric{Alias: d.alias[i], HasAlias: true, Timestamp: at, Type: d.metrics[i].Type, Value: v, Historical: hist}
	var av sparkplug.Value
	if ok {
		av = sparkplug.BoolOf(alarm)
	} else {
		m.Value, m.Null, q = sparkplug.Value{}, true, sparkplugQualityBad
	}
	was, wasAlarm := d.sentQ[i], d.sentAlarmQ[i]
	if hist { // its quality is its own; the live one stays as sent
		was, wasAlarm = sparkplugQualityGood, sparkplugQualityGood
	}
	sent := spQuality(&m, q, was)
	ms = append(ms, m)
	if !hist {
		d.last[i], d.lastAt[i], d.lastQ[i], d.sentQ[i] = m.Value, at, q, sent
	}
	if d.alarm[i] == 0 {
		return ms
	}
	am := sparkplug.Metric{Alias: d.alarm[i], HasAlias: true, Timestamp: at, Type: sparkplug.Boolean, Value: av, Null: !ok, Historical: hist}
	sent = spQuality(&am, q, wasAlarm)
	if !hist {
		d.lastAlarm[i], d.sentAlarmQ[i] = av, sent
	}
	return append(ms, am)
}

// spQuality gives m a Quality property of q when q is not good or the
// host last read quality was for it, and returns q.
func spQuality(m *sparkplug.Metric, q, was int32) int32 {
	if q == sparkplugQualityGood && was == sparkplugQualityGood {
		return q
	}
	if m.Properties == nil {
		m.Properties = &sparkplug.PropertySet{}
	}
	m.Properties.Add("Quality", sparkplug.PropertyValue{Type: sparkplug.Int32, Value: sparkplug.Int(sparkplug.Int32, int64(q))})
	return q
}

// spReading reports whether pk is a reading of d: one of its fields is a
// metric of d. Other records of the device (a command's, say) leave the
// buffer unsent: they are no metric a host could read.
func spReading(d *spDevice, pk *packet.Packet) bool {
	for _, f := range pk.Fields {
		if _, ok := d.byName[f.Name]; ok {
			return true
		}
	}
	return false
}

// spValue converts a packet's value to datatype t; ok is false when it
// has none (NaN, written as null) or cannot be read as t.
func spValue(t sparkplug.DataType, v packet.Value) (sparkplug.Value, bool) {
	text := v.String()
	switch t {
	case sparkplug.Boolean:
		switch strings.ToLower(text) {
		case "true", "1":
			return sparkplug.BoolOf(true), true
		case "false", "0":
			return sparkplug.BoolOf(false), true
		}
	case sparkplug.String, sparkplug.Text:
		return sparkplug.StringOf(text), true
	case sparkplug.Float, sparkplug.Double:
		f, err := strconv.ParseFloat(text, 64)
		if err != nil || math.IsNaN(f) || math.IsInf(f, 0) {
			return sparkplug.Value{}, false
		}
		if t == sparkplug.Float {
			return sparkplug.FloatOf(float32(f)), true
		}
		return sparkplug.DoubleOf(f), true
	case sparkplug.UInt8, sparkplug.UInt16, sparkplug.UInt32, sparkplug.UInt64:
		n, err := strconv.ParseUint(text, 10, 64)
		if err == nil {
			return sparkplug.Value{Kind: spKind(t), Num: n}, true
		}
	case sparkplug.Int8, sparkplug.Int16, sparkplug.Int32, sparkplug.Int64:
		n, err := strconv.ParseInt(text, 10, 64)
		if err == nil {
			return sparkplug.Int(t, n), true
		}
	}
	return sparkplug.Value{}, false
}

func spKind(t sparkplug.DataType) sparkplug.Kind {
	if t == sparkplug.UInt8 || t == sparkplug.UInt16 {
		return sparkplug.IntValue
	}
	return sparkplug.LongValue
}
