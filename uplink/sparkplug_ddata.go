package uplink

import (
	"math"
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
	seen := make([]bool, len(d.metrics))
	for _, f := range pk.Fields {
		i, ok := d.byName[f.Name]
		if !ok {
			continue // not in the birth: a host could not read it
		}
		seen[i] = true
		v, ok := spValue(d.metrics[i].Type, f.Value)
		m := sparkplug.Metric{Alias: d.alias[i], HasAlias: true, Timestamp: at, Type: d.metrics[i].Type, Value: v, Null: !ok, Historical: hist}
		if !ok {
			m.Value = sparkplug.Value{}
		}
		if !hist {
			d.last[i], d.lastAt[i] = m.Value, at
		}
		p.Metrics = append(p.Metrics, m)
	}
	for i, was := range seen {
		if !was { // the reading has no value for it: failed, never a stale value
			p.Metrics = append(p.Metrics, sparkplug.Metric{Alias: d.alias[i], HasAlias: true, Timestamp: at, Type: d.metrics[i].Type, Null: true, Historical: hist})
			if !hist {
				d.last[i], d.lastAt[i] = sparkplug.Value{}, at
			}
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
