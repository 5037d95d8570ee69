package uplink

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"log/slog"
	"math"
	"strconv"
	"strings"
	"sync"
	"time"

	paho "github.com/eclipse/paho.mqtt.golang"

	"fieldlink/buffer"
	"fieldlink/packet"
	"fieldlink/sparkplug"
)

// SparkplugConfig makes an MQTT upstream a Sparkplug B 3.0 edge node: the
// gateway is the node, each device of the site a Sparkplug device.
type SparkplugConfig struct {
	// GroupID and EdgeNode name the node in its topics,
	// spBv1.0/<group>/<type>/<edge node>[/<device>]. Neither may be empty
	// nor hold '/', '+' or '#'.
	GroupID, EdgeNode string
	// PrimaryHost is the primary host application's id, or empty.
	PrimaryHost string
	// Devices are the node's devices, in the order of the site file;
	// aliases are numbered from 1 across them in that order.
	Devices []SparkplugDevice
	// OnCommand runs a DCMD's metrics for device (see [SparkplugCommand]);
	// nil refuses every DCMD (logged).
	OnCommand func(ctx context.Context, cmd SparkplugCommand)
	// Online reports whether each device answers (false: offline); the
	// node asks every OnlineEvery (default 1s) and publishes a DDEATH or a
	// DBIRTH for each change (see [Sparkplug.SetOnline]). nil: every
	// device is online.
	Online      func() map[string]bool
	OnlineEvery time.Duration
	// Now is the clock of payload timestamps; nil means time.Now.
	Now func() time.Time
}

// SparkplugDevice is one device and the metrics its DBIRTH declares.
type SparkplugDevice struct {
	Name    string
	Metrics []SparkplugMetric
}

// SparkplugMetric is one metric of a device: a point of its profile.
type SparkplugMetric struct {
	Name string
	Type sparkplug.DataType
	Unit string // engineering units, the DBIRTH's "engUnit" property; may be empty
}

// SparkplugCommand is one DCMD as it arrived: its device, and its metrics
// with their names filled in from their aliases.
type SparkplugCommand struct {
	Device  string
	Seq     uint64 // the payload's seq, as the host sent it
	At      uint64 // the payload's timestamp
	Metrics []sparkplug.Metric
	Payload []byte // the message as it arrived
}

// sparkplugSession is the Sparkplug B state of an upstream: the
// birth/death sequence, the message sequence, aliases and the last value
// of each metric. Its mutex orders every publish of the node: a message's
// seq is taken and the message handed to paho under it, so the broker gets
// the messages in seq order.
type sparkplugSession struct {
	cfg  SparkplugConfig
	m    *MQTT
	log  *slog.Logger
	now  func() time.Time
	devs map[string]*spDevice
	ncmd string
	dcmd string // prefix: + device

	mu     sync.Mutex
	bdSeq  uint64 // of the current connection's will and NBIRTH
	nextBd uint64
	seq    uint64    // the next message's
	born   *mqttConn // the connection the births went out on
	conn   *mqttConn // the latest connection subscribed
	// The primary host's state, from its STATE messages: online, the
	// timestamp of the latest valid one, and when it came online (by the
	// gateway's clock): a reading older than that was kept while the host
	// was away, and goes out as historical.
	hostOnline bool
	hostTS     uint64
	hostSince  time.Time

	cmds chan spIncoming // NCMD and DCMD, for run
}

type spDevice struct {
	name    string
	metrics []SparkplugMetric
	alias   []uint64
	// The aliases of the packet's dedupe key, PacketSeq and packetEpoch.
	seqAlias, epochAlias uint64
	byName               map[string]int
	byAlias              map[uint64]int
	last                 []sparkplug.Value // NoValue: none known (sent as is_null)
	lastAt               []uint64
	dead                 bool // DDEATH sent, no DBIRTH since
}

type spIncoming struct {
	device  string // "" for NCMD
	state   bool   // a STATE message of the primary host
	payload []byte
}

// newSparkplugSession checks cfg and numbers the aliases.
func newSparkplugSession(cfg SparkplugConfig, log *slog.Logger) (*sparkplugSession, error) {
	for _, id := range []struct{ what, v string }{{"group_id", cfg.GroupID}, {"edge_node", cfg.EdgeNode}} {
		if err := sparkplug.CheckID(id.v); err != nil {
			return nil, fmt.Errorf("sparkplug %s: %w", id.what, err)
		}
	}
	if cfg.PrimaryHost != "" {
		if err := sparkplug.CheckID(cfg.PrimaryHost); err != nil {
			return nil, fmt.Errorf("sparkplug primary_host: %w", err)
		}
	}
	s := &sparkplugSession{cfg: cfg, log: log, now: cfg.Now, devs: map[string]*spDevice{},
		ncmd: sparkplug.Topic(cfg.GroupID, sparkplug.NCMD, cfg.EdgeNode, ""),
		dcmd: sparkplug.Topic(cfg.GroupID, sparkplug.DCMD, cfg.EdgeNode, "") + "/",
		cmds: make(chan spIncoming, subscriptionQueue)}
	if s.now == nil {
		s.now = time.Now
	}
	alias := uint64(1)
	for _, d := range cfg.Devices {
		if err := sparkplug.CheckID(d.Name); err != nil {
			return nil, fmt.Errorf("sparkplug device: %w", err)
		}
		if s.devs[d.Name] != nil {
			return nil, fmt.Errorf("sparkplug: device %q listed twice", d.Name)
		}
		sd := &spDevice{name: d.Name, metrics: d.Metrics, byName: map[string]int{}, byAlias: map[uint64]int{},
			last: make([]sparkplug.Value, len(d.Metrics)), lastAt: make([]uint64, len(d.Metrics))}
		for i, m := range d.Metrics {
			if _, dup := sd.byName[m.Name]; dup {
				return nil, fmt.Errorf("sparkplug: device %q: metric %q listed twice", d.Name, m.Name)
			}
			sd.byName[m.Name] = i
			sd.byAlias[alias] = i
			sd.alias = append(sd.alias, alias)
			alias++
		}
		s.devs[d.Name] = sd
	}
	// After every profile metric, so that those keep their numbers.
	for _, d := range cfg.Devices {
		sd := s.devs[d.Name]
		if _, dup := sd.byName[PacketSeq]; dup {
			return nil, fmt.Errorf("sparkplug: device %q: a point is named %q, the packet's own metric", d.Name, PacketSeq)
		}
		if _, dup := sd.byName[packetEpoch]; dup {
			return nil, fmt.Errorf("sparkplug: device %q: a point is named %q, the packet's own metric", d.Name, packetEpoch)
		}
		sd.seqAlias, sd.epochAlias = alias, alias+1
		alias += 2
	}
	return s, nil
}

// PacketSeq and packetEpoch are the metrics of every device that carry a
// packet's Seq and Epoch in its DDATA: with the edge node, the same dedupe
// key as a JSON packet's GatewayId, Epoch and Seq. In a DBIRTH they are
// null.
const (
	PacketSeq   = "Packet/Seq"
	packetEpoch = "Packet/Epoch"
)

func (s *sparkplugSession) stamp() uint64 { return uint64(s.now().UnixMilli()) }

// nextSeq returns the seq of the next message; s.mu is held.
func (s *sparkplugSession) nextSeq() uint64 {
	q := s.seq
	s.seq = (s.seq + 1) % 256
	return q
}

// will is called once per connection attempt: the NDEATH that the broker
// publishes if the connection breaks, with a new bdSeq.
func (s *sparkplugSession) will() (string, []byte) {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.bdSeq, s.nextBd = s.nextBd, (s.nextBd+1)%256
	return sparkplug.Topic(s.cfg.GroupID, sparkplug.NDEATH, s.cfg.EdgeNode, ""), s.ndeath()
}

// ndeath is the NDEATH payload: the bdSeq alone, no seq; s.mu is held.
func (s *sparkplugSession) ndeath() []byte {
	p := sparkplug.Payload{Timestamp: s.stamp(), Metrics: []sparkplug.Metric{
		{Name: sparkplug.BdSeq, Type: sparkplug.Int64, Value: sparkplug.Int(sparkplug.Int64, int64(s.bdSeq))},
	}}
	return p.Marshal()
}

// subscribe is called on each new connection, before births: NCMD, and
// DCMD for every device.
func (s *sparkplugSession) subscribe(ctx context.Context, c *mqttConn) error {
	s.mu.Lock()
	s.conn, s.hostOnline = c, false // online again once its STATE says so
	s.mu.Unlock()
	topics := map[string]byte{s.ncmd: 1, s.dcmd + "+": 1}
	if s.cfg.PrimaryHost != "" {
		topics[sparkplug.StateTopic(s.cfg.PrimaryHost)] = 1
	}
	st := c.cl.SubscribeMultiple(topics, s.onMessage)
	if err := s.m.await(ctx, c, st, s.m.cfg.PublishTimeout); err != nil {
		return fmt.Errorf("subscribe to NCMD, DCMD and STATE: %w", err)
	}
	return nil
}

// connected is called on each new connection once subscribed: the births,
// at once without a primary host, else when its STATE says it is online.
func (s *sparkplugSession) connected(ctx context.Context, c *mqttConn) error {
	if s.cfg.PrimaryHost != "" {
		return nil
	}
	return s.births(ctx, c)
}

// hostState applies a STATE message of the primary host (JSON
// {"online": bool, "timestamp": ms}, retained): one older than the
// latest valid one is ignored; online births the node on the current
// connection; offline, once the host was online on this connection, ends
// the connection (the broker publishes the NDEATH will), and Run connects
// again and waits for the host. (The retained offline STATE that a new
// connection finds only keeps the node waiting.)
func (s *sparkplugSession) hostState(ctx context.Context, payload []byte) {
	var st struct {
		Online    *bool   `json:"online"`
		Timestamp *uint64 `json:"timestamp"`
	}
	if err := json.Unmarshal(payload, &st); err != nil || st.Online == nil || st.Timestamp == nil {
		s.log.Warn("Sparkplug STATE of the primary host unreadable: ignored", "upstream", s.m.name, "host", s.cfg.PrimaryHost, "err", err)
		return
	}
	s.mu.Lock()
	if *st.Timestamp < s.hostTS {
		s.mu.Unlock()
		s.log.Info("Sparkplug STATE older than the latest: ignored", "upstream", s.m.name, "host", s.cfg.PrimaryHost)
		return
	}
	s.hostTS = *st.Timestamp
	was := s.hostOnline
	s.hostOnline = *st.Online
	c := s.conn
	if *st.Online && !was {
		s.hostSince = time.Now()
	}
	s.mu.Unlock()
	if c == nil {
		return
	}
	switch {
	case *st.Online && !was:
		s.log.Info("Sparkplug primary host online: births, then what was kept", "upstream", s.m.name, "host", s.cfg.PrimaryHost)
		if err := s.births(ctx, c); err != nil {
			s.log.Warn("births failed", "upstream", s.m.name, "err", err)
		}
	case !*st.Online && was:
		s.log.Warn("Sparkplug primary host offline: disconnecting; data waits in the buffer", "upstream", s.m.name, "host", s.cfg.PrimaryHost)
		c.drop(fmt.Errorf("primary host %s offline", s.cfg.PrimaryHost))
	}
}

// onMessage runs on paho's router goroutine: it must not block.
func (s *sparkplugSession) onMessage(_ paho.Client, msg paho.Message) {
	in := spIncoming{payload: append([]byte(nil), msg.Payload()...)}
	if s.cfg.PrimaryHost != "" && msg.Topic() == sparkplug.StateTopic(s.cfg.PrimaryHost) {
		in.state = true // retained, as it should be
	} else if msg.Retained() {
		s.log.Warn("retained Sparkplug command dropped: commands are never run late", "upstream", s.m.name, "topic", msg.Topic())
		return
	}
	if dev, ok := strings.CutPrefix(msg.Topic(), s.dcmd); ok {
		in.device = dev
	}
	select {
	case s.cmds <- in:
	default:
		s.log.Warn("Sparkplug command dropped: too many waiting", "upstream", s.m.name, "topic", msg.Topic(), "waiting", subscriptionQueue)
	}
}

// run handles NCMD, DCMD and STATE, and follows the devices' health,
// until ctx ends; [MQTT.Run] owns it.
func (s *sparkplugSession) run(ctx context.Context) {
	var tick <-chan time.Time
	if s.cfg.Online != nil {
		every := s.cfg.OnlineEvery
		if every <= 0 {
			every = time.Second
		}
		t := time.NewTicker(every)
		defer t.Stop()
		tick = t.C
	}
	for {
		select {
		case <-ctx.Done():
			return
		case in := <-s.cmds:
			s.handle(ctx, in)
		case <-tick:
			for dev, on := range s.cfg.Online() {
				if err := s.setOnline(ctx, dev, on); err != nil {
					s.log.Warn("Sparkplug device state not published", "upstream", s.m.name, "device", dev, "online", on, "err", err)
				}
			}
		}
	}
}

func (s *sparkplugSession) handle(ctx context.Context, in spIncoming) {
	if in.state {
		s.hostState(ctx, in.payload)
		return
	}
	p, err := sparkplug.Unmarshal(in.payload)
	if err != nil {
		s.log.Warn("Sparkplug command refused", "upstream", s.m.name, "device", in.device, "err", err)
		return
	}
	if in.device == "" {
		m, ok := p.Metric(sparkplug.Rebirth)
		if b, isBool := m.Value.Bool(); !ok || !isBool || !b {
			s.log.Warn("NCMD without a true Node Control/Rebirth ignored", "upstream", s.m.name)
			return
		}
		s.mu.Lock()
		c := s.born
		s.mu.Unlock()
		if c == nil || c != s.m.conn() {
			return // not born on this connection: it births when it may
		}
		if err := s.births(ctx, c); err != nil {
			s.log.Warn("rebirth failed", "upstream", s.m.name, "err", err)
		}
		return
	}
	d := s.devs[in.device]
	if d == nil {
		s.log.Warn("DCMD for an unknown device refused", "upstream", s.m.name, "device", in.device)
		return
	}
	cmd := SparkplugCommand{Device: d.name, Seq: p.Seq, At: p.Timestamp, Metrics: p.Metrics, Payload: in.payload}
	for i := range cmd.Metrics {
		m := &cmd.Metrics[i]
		if m.Name == "" && m.HasAlias {
			if j, ok := d.byAlias[m.Alias]; ok {
				m.Name = d.metrics[j].Name
			}
		}
		if j, ok := d.byName[m.Name]; ok && m.Type == 0 {
			m.Type = d.metrics[j].Type
		}
	}
	if s.cfg.OnCommand == nil {
		s.log.Warn("DCMD refused: no command handler", "upstream", s.m.name, "device", in.device)
		return
	}
	s.cfg.OnCommand(ctx, cmd)
}

// births publishes NBIRTH (seq 0) and a DBIRTH for every device not dead,
// on c, and waits for their PUBACKs. Called on each connection before it
// carries data, and on a rebirth request.
func (s *sparkplugSession) births(ctx context.Context, c *mqttConn) error {
	s.mu.Lock()
	s.seq = 0
	s.born = c
	nb := sparkplug.Payload{Timestamp: s.stamp(), HasSeq: true, Seq: s.nextSeq(), Metrics: []sparkplug.Metric{
		{Name: sparkplug.BdSeq, Type: sparkplug.Int64, Value: sparkplug.Int(sparkplug.Int64, int64(s.bdSeq))},
		{Name: sparkplug.Rebirth, Type: sparkplug.Boolean, Value: sparkplug.BoolOf(false)},
	}}
	toks := []paho.Token{c.cl.Publish(sparkplug.Topic(s.cfg.GroupID, sparkplug.NBIRTH, s.cfg.EdgeNode, ""), 1, false, nb.Marshal())}
	for _, dc := range s.cfg.Devices {
		if d := s.devs[dc.Name]; !d.dead {
			toks = append(toks, s.dbirth(c, d))
		}
	}
	s.mu.Unlock()
	for _, tok := range toks {
		if err := s.m.await(ctx, c, tok, s.m.cfg.PublishTimeout); err != nil {
			return fmt.Errorf("births: %w", err)
		}
	}
	return nil
}

// dbirth hands d's DBIRTH to paho: every metric with its name, alias,
// datatype, engineering units and last value (is_null when none is
// known); s.mu is held.
func (s *sparkplugSession) dbirth(c *mqttConn, d *spDevice) paho.Token {
	p := sparkplug.Payload{Timestamp: s.stamp(), HasSeq: true, Seq: s.nextSeq()}
	for i, m := range d.metrics {
		sm := sparkplug.Metric{Name: m.Name, Alias: d.alias[i], HasAlias: true, Type: m.Type, Timestamp: d.lastAt[i], Value: d.last[i]}
		if sm.Timestamp == 0 {
			sm.Timestamp = p.Timestamp
		}
		if sm.Value.Kind == sparkplug.NoValue {
			sm.Null = true
		}
		if m.Unit != "" {
			sm.Properties = &sparkplug.PropertySet{}
			sm.Properties.Add("engUnit", sparkplug.PropertyValue{Type: sparkplug.String, Value: sparkplug.StringOf(m.Unit)})
		}
		p.Metrics = append(p.Metrics, sm)
	}
	p.Metrics = append(p.Metrics,
		sparkplug.Metric{Name: PacketSeq, Alias: d.seqAlias, HasAlias: true, Type: sparkplug.UInt64, Timestamp: p.Timestamp, Null: true},
		sparkplug.Metric{Name: packetEpoch, Alias: d.epochAlias, HasAlias: true, Type: sparkplug.String, Timestamp: p.Timestamp, Null: true})
	return c.cl.Publish(sparkplug.Topic(s.cfg.GroupID, sparkplug.DBIRTH, s.cfg.EdgeNode, d.name), 1, false, p.Marshal())
}

// ending publishes the NDEATH before a clean disconnect.
func (s *sparkplugSession) ending(c *mqttConn) error {
	s.mu.Lock()
	tok := c.cl.Publish(sparkplug.Topic(s.cfg.GroupID, sparkplug.NDEATH, s.cfg.EdgeNode, ""), 1, false, s.ndeath())
	s.mu.Unlock()
	return s.m.await(context.Background(), c, tok, min(s.m.cfg.PublishTimeout, mqttOfflineTimeout))
}

// SetOnline tells the node that device went offline (a DDEATH is
// published, its last values are forgotten: they are stale) or came back
// (a DBIRTH, its metrics null until a reading arrives). A repeated state
// publishes nothing. Without a connection the state is kept for the next
// births.
func (sp *sparkplugNode) SetOnline(ctx context.Context, device string, online bool) error {
	return sp.s.setOnline(ctx, device, online)
}

func (s *sparkplugSession) setOnline(ctx context.Context, device string, online bool) error {
	d := s.devs[device]
	if d == nil {
		return fmt.Errorf("uplink: sparkplug: unknown device %q", device)
	}
	s.mu.Lock()
	if d.dead == !online {
		s.mu.Unlock()
		return nil
	}
	d.dead = !online
	for i := range d.last {
		d.last[i], d.lastAt[i] = sparkplug.Value{}, 0
	}
	c := s.m.conn()
	if c == nil || c != s.born {
		s.mu.Unlock()
		return nil
	}
	var tok paho.Token
	if online {
		tok = s.dbirth(c, d)
	} else {
		p := sparkplug.Payload{Timestamp: s.stamp(), HasSeq: true, Seq: s.nextSeq()}
		tok = c.cl.Publish(sparkplug.Topic(s.cfg.GroupID, sparkplug.DDEATH, s.cfg.EdgeNode, d.name), 1, false, p.Marshal())
	}
	s.mu.Unlock()
	if err := s.m.await(ctx, c, tok, s.m.cfg.PublishTimeout); err != nil {
		return fmt.Errorf("uplink: mqtt %s: %w", s.m.name, err)
	}
	return nil
}

// sparkplugNode is the delivery loop's sender for a sparkplugNode B upstream: each
// record, a packet of one device, goes out as a DDATA by alias, and leaves
// the buffer once the DDATA of every record of its batch was acknowledged.
// A record with no field that is a metric of its device (a command's
// record) leaves the buffer unsent.
type sparkplugNode struct {
	s      *sparkplugSession
	window int
}

// Name implements Sender.
func (sp *sparkplugNode) Name() string { return sp.s.m.Name() }

// MaxBatch implements Sender: a batch's records are published in order,
// pipelined, up to the upstream's window.
func (sp *sparkplugNode) MaxBatch() int { return sp.window }

// Window implements Sender: one batch at a time, so that the packets go
// out in the buffer's order (oldest first, after an outage), as
// store-and-forward wants; concurrent batches would race for the seq.
func (sp *sparkplugNode) Window() int { return 1 }

// Up implements Sender: connected, births sent (with a primary host: it
// is online). While it is not, the packets wait in the buffer.
func (sp *sparkplugNode) Up() bool {
	s := sp.s
	c := s.m.conn()
	s.mu.Lock()
	defer s.mu.Unlock()
	return c != nil && c == s.born
}

// LastError is the broker connection's latest failure.
func (sp *sparkplugNode) LastError() (string, time.Time) { return sp.s.m.LastError() }

// MQTT is the upstream's connection.
func (sp *sparkplugNode) MQTT() *MQTT { return sp.s.m }

// Send publishes the records as DDATA, in order, pipelined, and returns
// nil once the broker acknowledged every one. A record that is no packet,
// or a packet of a device that is not the node's, fails the batch at once
// with a permanent error, before anything is published.
func (sp *sparkplugNode) Send(ctx context.Context, batch []buffer.Record) error {
	s := sp.s
	pks := make([]*packet.Packet, len(batch))
	for i, r := range batch {
		pk, err := packet.Decode(r.Data)
		if err == nil && s.devs[pk.DeviceID] == nil {
			err = fmt.Errorf("device %q is not one of the node's", pk.DeviceID)
		}
		if err != nil {
			return mqttTopicError{fmt.Errorf("uplink: mqtt %s: sparkplug: publish seq %d: %w", s.m.name, r.Seq, err)}
		}
		pks[i] = pk
	}
	s.mu.Lock()
	c := s.m.conn()
	if c == nil || c != s.born {
		s.mu.Unlock()
		return s.m.notConnected()
	}
	toks := make([]paho.Token, len(pks))
	for i, pk := range pks {
		toks[i] = s.ddata(c, s.devs[pk.DeviceID], pk)
	}
	s.mu.Unlock()
	for i, tok := range toks {
		if tok == nil {
			continue
		}
		if err := s.m.await(ctx, c, tok, s.m.cfg.PublishTimeout); err != nil {
			return fmt.Errorf("uplink: mqtt %s: publish seq %d: %w", s.m.name, batch[i].Seq, err)
		}
	}
	return nil
}

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
	return c.cl.Publish(sparkplug.Topic(s.cfg.GroupID, sparkplug.DDATA, s.cfg.EdgeNode, d.name), 1, false, p.Marshal())
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

// newSparkplug makes m a Sparkplug B edge node ([SparkplugConfig]) and
// returns its sender. Call it before m's Run.
func newSparkplug(m *MQTT, cfg SparkplugConfig, window int) (*sparkplugNode, error) {
	if m.running.Load() {
		return nil, errors.New("uplink: sparkplug: the MQTT upstream already runs")
	}
	s, err := newSparkplugSession(cfg, m.log)
	if err != nil {
		return nil, fmt.Errorf("uplink: mqtt %s: %w", m.name, err)
	}
	s.m = m
	m.session = s
	if window <= 0 {
		window = m.Window()
	}
	return &sparkplugNode{s: s, window: window}, nil
}

// EncodingSparkplugB is the encoding of an MQTT upstream that is a
// Sparkplug B edge node (see [SparkplugConfig]).
const EncodingSparkplugB Encoding = "sparkplug_b"
