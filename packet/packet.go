package packet

import (
	"strconv"
	"time"
)

// DefaultIDField is the key of the site id in DataHead when
// [Packet.IDField] is empty: the farm platform's.
const DefaultIDField = "FarmId"

// Field is one named measurement of the DataBody.
type Field struct {
	Name  string
	Value Value
}

// Packet is one reading of one device, as the platform receives it.
//
// A Packet is plain data: fill it in, encode it with [Packet.AppendJSON].
// Encoding only reads it, so several goroutines may encode the same Packet
// at once as long as none modifies it.
type Packet struct {
	// At is the reading time. It gives Date and Time (in Loc) to the
	// second and TS (in UTC) to the millisecond; finer parts are truncated.
	// TS keeps the milliseconds so that readings less than a second apart
	// keep distinct times (InfluxDB keeps one point per time).
	At time.Time

	// Loc is the site's time zone, for Date and Time. Nil means UTC.
	Loc *time.Location

	// IDField is the DataHead key of SiteID: "FarmId" or "MineId". Empty
	// means DefaultIDField. It must not be one of the other DataHead keys;
	// the config is validated for that at start-up, not here.
	IDField string

	SiteID    string // farm or mine id, e.g. "001"
	DataType  string // e.g. "Rain", "Gas"
	GatewayID string // this gateway's id: with Seq, the platform's dedup key
	DeviceID  string // the device within the site, e.g. "rain-1"

	// Epoch is written only when not empty.
	Epoch string

	// Seq is the gateway's persistent, strictly increasing sequence number.
	Seq uint64

	// ClockUnsynced says that At was read from a clock the kernel did not
	// hold as synchronised (before NTP set it: fake-hwclock's last saved
	// time, or 1970), so that At may be far from the truth. DataHead gets
	// "ClockUnsynced":"True".
	ClockUnsynced bool

	// Mono is the monotonic clock's reading (CLOCK_MONOTONIC, of this
	// boot) when At was taken, for a ClockUnsynced packet: once the clock
	// is set, the buffer re-stamps it from this. Zero: none. Not encoded.
	Mono time.Duration

	// AlarmFields names the fields whose value crossed an alarm threshold,
	// in body order. Non-empty makes this an alarm packet: DataHead gets
	// "Alarm":"True" and "AlarmFields", and alarms are delivered first.
	AlarmFields []string

	// Fields is the DataBody, written in this order. Names should be
	// unique: a duplicate is written twice, and most JSON readers keep only
	// the last.
	Fields []Field

	// More says that the poller that made p starts another poll at once
	// (devices due together): a hint that lets the buffer store a poll
	// cycle's packets in one commit. It is not encoded.
	More bool
}

// UnsyncedMark is how DataHead marks a packet whose At was read from an
// unsynchronised clock, as AppendJSON writes it: after TS and Epoch,
// before Alarm.
const UnsyncedMark = `,"ClockUnsynced":"True"`

// Alarm reports whether p is an alarm packet, that is, whether any field
// crossed its threshold.
func (p *Packet) Alarm() bool { return len(p.AlarmFields) > 0 }

// ValueStyle is how DataBody values are written: the site file's
// packet.values. The zero value, [Strings], is what the platform expects.
type ValueStyle uint8

const (
	// Strings writes every body value as a JSON string: "25.3", "True".
	Strings ValueStyle = iota
	// Numbers writes numbers and booleans as JSON numbers and true/false,
	// and NaN and infinities as null. Strings stay strings.
	Numbers
)

// AppendJSON appends p as one line of compact JSON, without a trailing
// newline, and returns the extended buffer. Values of style other than
// [Numbers] mean [Strings]. The head does not depend on style.
//
// It uses no reflection and does not allocate when dst has room for the
// packet (a few hundred bytes for twenty fields); reuse the buffer.
//
// AppendJSON does not validate p: an empty id, duplicate field names or an
// AlarmFields entry that is not in Fields are written as they are. A year
// outside 0000–9999, which RFC 3339 cannot express, is written as
// [time.Time.Format] writes it.
func (p *Packet) AppendJSON(dst []byte, style ValueStyle) []byte {
	loc := p.Loc
	if loc == nil {
		loc = time.UTC
	}
	local := p.At.In(loc)

	dst = append(dst, `{"DataHead":{"Date":"`...)
	dst = appendDate(dst, local)
	dst = append(dst, `","Time":"`...)
	dst = appendClock(dst, local)
	dst = append(dst, `",`...)
	if p.IDField == "" {
		dst = append(dst, `"`+DefaultIDField+`"`...)
	} else {
		dst = appendString(dst, p.IDField)
	}
	dst = append(dst, ':')
	dst = appendString(dst, p.SiteID)
	dst = append(dst, `,"DataType":`...)
	dst = appendString(dst, p.DataType)
	dst = append(dst, `,"GatewayId":`...)
	dst = appendString(dst, p.GatewayID)
	dst = append(dst, `,"DeviceId":`...)
	dst = appendString(dst, p.DeviceID)
	dst = append(dst, `,"Seq":`...)
	dst = strconv.AppendUint(dst, p.Seq, 10)

	utc := p.At.UTC()
	dst = append(dst, `,"TS":"`...)
	dst = appendDate(dst, utc)
	dst = append(dst, 'T')
	dst = appendClock(dst, utc)
	dst = append(dst, '.')
	ms := utc.Nanosecond() / 1e6
	dst = append(dst, byte('0'+ms/100), byte('0'+ms/10%10), byte('0'+ms%10))
	dst = append(dst, `Z"`...)

	if p.Epoch != "" {
		dst = append(dst, `,"Epoch":`...)
		dst = appendString(dst, p.Epoch)
	}
	if p.ClockUnsynced {
		dst = append(dst, UnsyncedMark...)
	}
	if len(p.AlarmFields) > 0 {
		dst = append(dst, `,"Alarm":"True","AlarmFields":[`...)
		for i, name := range p.AlarmFields {
			if i > 0 {
				dst = append(dst, ',')
			}
			dst = appendString(dst, name)
		}
		dst = append(dst, ']')
	}

	dst = append(dst, `},"DataBody":{`...)
	for i := range p.Fields {
		f := &p.Fields[i]
		if i > 0 {
			dst = append(dst, ',')
		}
		dst = appendString(dst, f.Name)
		dst = append(dst, ':')
		dst = f.Value.appendJSON(dst, style)
	}
	return append(dst, "}}"...)
}

// appendDate appends t's date as YYYY-MM-DD.
func appendDate(dst []byte, t time.Time) []byte {
	y, m, d := t.Date()
	if y < 0 || y > 9999 {
		return t.AppendFormat(dst, "2006-01-02")
	}
	dst = append(dst, byte('0'+y/1000), byte('0'+y/100%10), byte('0'+y/10%10), byte('0'+y%10), '-')
	dst = append2(dst, int(m))
	dst = append(dst, '-')
	return append2(dst, d)
}

// appendClock appends t's time of day as HH:MM:SS.
func appendClock(dst []byte, t time.Time) []byte {
	h, m, s := t.Clock()
	dst = append2(dst, h)
	dst = append(dst, ':')
	dst = append2(dst, m)
	dst = append(dst, ':')
	return append2(dst, s)
}

// append2 appends v, 0 ≤ v < 100, as two digits.
func append2(dst []byte, v int) []byte {
	return append(dst, byte('0'+v/10), byte('0'+v%10))
}
