package sparkplug

import (
	"context"
	"crypto/tls"
	"time"

	spb "fieldlink/sparkplug"
)

// Config makes an MQTT upstream a Sparkplug B 3.0 edge node: the
// gateway is the node, each device of the site a Sparkplug device.
type Config struct {
	// GroupID and EdgeNode name the node in its topics,
	// spBv1.0/<group>/<type>/<edge node>[/<device>]. Neither may be empty
	// nor hold '/', '+' or '#'.
	GroupID, EdgeNode string
	// PrimaryHost is the primary host application's id, or empty.
	PrimaryHost string
	// Servers are the node's MQTT servers after the upstream's own, in
	// order. The node is connected to one at a time and walks to the
	// next when it cannot connect, loses its connection, or the primary
	// host's STATE there says offline (Sparkplug 3.0, "Primary Host
	// Application STATE in Multiple MQTT Server Topologies").
	Servers []Server
	// Devices are the node's devices, in the order of the site file;
	// aliases are numbered from 1 across them in that order.
	Devices []Device
	// OnCommand runs a DCMD's metrics for device (see [Command]),
	// or reports its refusal; nil refuses every DCMD (logged). It runs on
	// a goroutine of its own, one DCMD at a time, never on the one that
	// follows STATE, NCMD and births: a DCMD's writes never hold a rebirth.
	OnCommand func(ctx context.Context, cmd Command)
	// Online reports whether each device answers (false: offline); the
	// node asks every OnlineEvery (default 1s) and publishes a DDEATH or a
	// DBIRTH for each change (as the node's SetOnline does). nil: every
	// device is online.
	Online      func() map[string]bool
	OnlineEvery time.Duration
	// Now is the clock of payload timestamps; nil means time.Now.
	Now func() time.Time
}

// Server is one more MQTT server of a node: where and how to
// connect; everything else is the upstream's.
type Server struct {
	URL                string
	Username, Password string
	TLS                *tls.Config // nil over mqtt://
}

// Device is one device and the metrics its DBIRTH declares.
type Device struct {
	Name    string
	Metrics []Metric
}

// Metric is one metric of a device: a point of its profile.
type Metric struct {
	Name string
	Type spb.DataType
	Unit string // engineering units, the DBIRTH's "engUnit" property; may be empty
	// Alarm says the point has alarm limits: the node declares a Boolean
	// metric "<Name>/Alarm" beside it, true in a DDATA whose packet names
	// the point among its AlarmFields (the limit crossed), else false.
	Alarm bool
}

// alarmSuffix makes the name of a point's alarm metric.
const alarmSuffix = "/Alarm"

// The values of a metric's "Quality" property (Int32), as Sparkplug 3.0
// defines them and Ignition reads them.
const (
	qualityBad   = 0   // no value: a failed read, a device offline
	qualityGood  = 192 // a reading of the point, timed by a clock in step
	qualityStale = 500 // a reading whose time is uncertain (ClockUnsynced)
)

// Bounds of a DCMD. A DCMD needs no key where DCMDs run at all
// (downlink.allow_unsigned), so they bound what one message can do.
const (
	// MaxCommandMetrics is the most metrics, so writes, one DCMD
	// may carry; a DCMD with more is refused whole, nothing written.
	MaxCommandMetrics = 32
	// MaxCommandBytes bounds a DCMD's payload: room for
	// MaxCommandMetrics metrics with long names, and the most a
	// connection of a Sparkplug node takes in one message (see
	// [uplink.Subscription.MaxSize]).
	MaxCommandBytes = 16 << 10
)

// Command is one DCMD as it arrived: its device, and its metrics
// with their names filled in from their aliases.
type Command struct {
	Device  string
	Seq     uint64 // the payload's seq, as the host sent it
	At      uint64 // the payload's timestamp
	Metrics []spb.Metric
	Payload []byte // the message as it arrived
	// Refused, when set, is why the node refuses the DCMD whole (its
	// payload unreadable, more than MaxCommandMetrics metrics,
	// a device not the node's): OnCommand reports and audits it, and
	// writes nothing.
	Refused string
}

// PacketSeq and packetEpoch are the metrics of every device that carry a
// packet's Seq and Epoch in its DDATA: with the edge node, the same dedupe
// key as a JSON packet's GatewayId, Epoch and Seq. In a DBIRTH they are
// null.
const (
	PacketSeq   = "Packet/Seq"
	packetEpoch = "Packet/Epoch"
)
