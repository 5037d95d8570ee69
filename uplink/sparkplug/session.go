package sparkplug

import (
	"context"
	"fmt"
	"log/slog"
	"sync"
	"sync/atomic"
	"time"

	paho "github.com/eclipse/paho.mqtt.golang"

	spb "fieldlink/sparkplug"
	"fieldlink/uplink/mqtt"
)

// session is the Sparkplug B state of an upstream: the
// birth/death sequence, the message sequence, aliases and the last value
// of each metric. Its mutex orders every publish of the node: a message's
// seq is taken and the message handed to paho under it, so the broker gets
// the messages in seq order.
type session struct {
	cfg Config
	// servers are the node's MQTT servers, in the order of the site
	// file; the node is on one at a time, srv (see walk).
	servers []*server
	srv     atomic.Pointer[server]
	walkc   chan *server // walk asks to leave a server (see leave)
	log     *slog.Logger
	now     func() time.Time
	devs    map[string]*device
	ncmd    string
	dcmd    string // prefix: + device
	// barrier is a topic filter the node never subscribes to: its
	// UNSUBSCRIBE confirms what was published before it (see confirm).
	barrier string

	mu     sync.Mutex
	bdSeq  uint64 // of the current connection's will and NBIRTH
	nextBd uint64
	seq    uint64     // the next message's
	born   *mqtt.Link // the connection the births went out on
	conn   *mqtt.Link // the latest connection subscribed
	// The primary host's state, from its STATE messages: online, the
	// timestamp of the latest valid one, and when it came online (by the
	// gateway's clock): a reading older than that was kept while the host
	// was away, and goes out as historical.
	hostOnline bool
	hostTS     uint64
	hostSince  time.Time
	// bornAny is set by births: walk pauses after a round of its
	// servers in which the node was born on none.
	bornAny bool

	cmds  chan incoming // STATE and NCMD, for run
	dcmds chan incoming // DCMD, for runCommands
}

type device struct {
	name    string
	metrics []Metric
	alias   []uint64
	// The aliases of the packet's dedupe key, PacketSeq and packetEpoch.
	seqAlias, epochAlias uint64
	byName               map[string]int
	byAlias              map[uint64]int
	last                 []spb.Value // NoValue: none known (sent as is_null)
	lastAt               []uint64
	lastQ                []int32 // the quality of last
	// sentQ is the quality the host last read for each metric (in a
	// birth or a live DDATA): a good value after another quality says
	// so, since a host keeps a metric's quality until told.
	sentQ []int32
	// alarm is the alias of each metric's alarm metric, 0 for none; its
	// last value and quality are lastAlarm, sentAlarmQ.
	alarm      []uint64
	lastAlarm  []spb.Value
	sentAlarmQ []int32
	dead       bool // DDEATH sent, no DBIRTH since
}

type incoming struct {
	srv     *server // the server it came through
	device  string  // "" for NCMD
	state   bool    // a STATE message of the primary host
	payload []byte
}

// newSession checks cfg and numbers the aliases.
func newSession(cfg Config, log *slog.Logger) (*session, error) {
	for _, id := range []struct{ what, v string }{{"group_id", cfg.GroupID}, {"edge_node", cfg.EdgeNode}} {
		if err := spb.CheckID(id.v); err != nil {
			return nil, fmt.Errorf("sparkplug %s: %w", id.what, err)
		}
	}
	if cfg.PrimaryHost != "" {
		if err := spb.CheckID(cfg.PrimaryHost); err != nil {
			return nil, fmt.Errorf("sparkplug primary_host: %w", err)
		}
	}
	s := &session{cfg: cfg, log: log, now: cfg.Now, devs: map[string]*device{},
		ncmd:    spb.Topic(cfg.GroupID, spb.NCMD, cfg.EdgeNode, ""),
		dcmd:    spb.Topic(cfg.GroupID, spb.DCMD, cfg.EdgeNode, "") + "/",
		barrier: spb.Topic(cfg.GroupID, spb.NCMD, cfg.EdgeNode, "") + "/confirm",
		cmds:    make(chan incoming, queueLen), dcmds: make(chan incoming, queueLen),
		walkc: make(chan *server, 1)}
	if s.now == nil {
		s.now = time.Now
	}
	alias := uint64(1)
	for _, d := range cfg.Devices {
		if err := spb.CheckID(d.Name); err != nil {
			return nil, fmt.Errorf("sparkplug device: %w", err)
		}
		if s.devs[d.Name] != nil {
			return nil, fmt.Errorf("sparkplug: device %q listed twice", d.Name)
		}
		n := len(d.Metrics)
		sd := &device{name: d.Name, metrics: d.Metrics, byName: map[string]int{}, byAlias: map[uint64]int{},
			last: make([]spb.Value, n), lastAt: make([]uint64, n), lastQ: make([]int32, n), sentQ: make([]int32, n),
			alarm: make([]uint64, n), lastAlarm: make([]spb.Value, n), sentAlarmQ: make([]int32, n)}
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
	// Then the alarm metrics, so that the others keep their numbers.
	for _, d := range cfg.Devices {
		sd := s.devs[d.Name]
		for i, m := range d.Metrics {
			if !m.Alarm {
				continue
			}
			if _, dup := sd.byName[m.Name+alarmSuffix]; dup {
				return nil, fmt.Errorf("sparkplug: device %q: a point is named %q, the alarm metric of %q", d.Name, m.Name+alarmSuffix, m.Name)
			}
			sd.alarm[i] = alias
			alias++
		}
	}
	return s, nil
}

// mq is the server the node is on now.
func (s *session) mq() *server { return s.srv.Load() }

func (s *session) stamp() uint64 { return uint64(s.now().UnixMilli()) }

// nextSeq returns the seq of the next message; s.mu is held.
func (s *session) nextSeq() uint64 {
	q := s.seq
	s.seq = (s.seq + 1) % 256
	return q
}

// will is called once per connection attempt: the NDEATH that the broker
// publishes if the connection breaks, with a new bdSeq.
func (s *session) will() (string, []byte) {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.bdSeq, s.nextBd = s.nextBd, (s.nextBd+1)%256
	return spb.Topic(s.cfg.GroupID, spb.NDEATH, s.cfg.EdgeNode, ""), s.ndeath()
}

// ndeath is the NDEATH payload: the bdSeq alone, no seq; s.mu is held.
func (s *session) ndeath() []byte {
	p := spb.Payload{Timestamp: s.stamp(), Metrics: []spb.Metric{
		{Name: spb.BdSeq, Type: spb.Int64, Value: spb.Int(spb.Int64, int64(s.bdSeq))},
	}}
	return p.Marshal()
}

// subscribe is called on each new connection l to server v, before
// births: NCMD, and DCMD for every device.
func (s *session) subscribe(ctx context.Context, v *server, l *mqtt.Link) error {
	s.mu.Lock()
	s.conn, s.hostOnline = l, false // online again once its STATE says so
	s.mu.Unlock()
	topics := map[string]byte{s.ncmd: 1, s.dcmd + "+": 1}
	if s.cfg.PrimaryHost != "" {
		topics[spb.StateTopic(s.cfg.PrimaryHost)] = 1
	}
	st := l.Client().SubscribeMultiple(topics, func(_ paho.Client, msg paho.Message) { s.onMessage(v, msg) })
	if err := l.Await(ctx, st); err != nil {
		return fmt.Errorf("subscribe to NCMD, DCMD and STATE: %w", err)
	}
	return nil
}

// connected is called on each new connection l to server v: the
// subscriptions, then the births, at once without a primary host, else
// when its STATE says it is online.
func (s *session) connected(ctx context.Context, v *server, l *mqtt.Link) error {
	if err := s.subscribe(ctx, v, l); err != nil {
		return err
	}
	if s.cfg.PrimaryHost != "" {
		return nil
	}
	return s.births(ctx, l)
}

// births publishes NBIRTH (seq 0) and a DBIRTH for every device not dead,
// on l, and waits for their PUBACKs. Called on each connection before it
// carries data, and on a rebirth request.
func (s *session) births(ctx context.Context, l *mqtt.Link) error {
	s.mu.Lock()
	s.seq = 0
	s.born, s.bornAny = l, true
	now := s.stamp()
	nb := spb.Payload{Timestamp: now, HasSeq: true, Seq: s.nextSeq(), Metrics: []spb.Metric{
		{Name: spb.BdSeq, Type: spb.Int64, Timestamp: now, Value: spb.Int(spb.Int64, int64(s.bdSeq))},
		{Name: spb.Rebirth, Type: spb.Boolean, Timestamp: now, Value: spb.BoolOf(false)},
	}}
	toks := []paho.Token{l.Client().Publish(spb.Topic(s.cfg.GroupID, spb.NBIRTH, s.cfg.EdgeNode, ""), dataQoS, false, nb.Marshal())}
	for _, dc := range s.cfg.Devices {
		if d := s.devs[dc.Name]; !d.dead {
			toks = append(toks, s.dbirth(l, d))
		}
	}
	s.mu.Unlock()
	if err := s.confirm(ctx, l, toks); err != nil {
		return fmt.Errorf("births: %w", err)
	}
	return nil
}

// dataQoS is the QoS of NBIRTH, DBIRTH, DDATA and DDEATH: Sparkplug
// 3.0 requires 0 (tck-id-payloads-nbirth-qos, -dbirth-qos, -ddata-qos,
// topics-ddeath-mqtt). The NDEATH, will or published, is QoS 1.
const dataQoS = 0

// confirm returns nil once the broker has read every message of toks
// (nil ones skipped) from connection l: each written to the connection
// (QoS 0 has no PUBACK), then an UNSUBSCRIBE of a filter the node never
// subscribed to, whose UNSUBACK the broker sends after it has handled
// every packet before it on the connection (a broker reads a
// connection's packets in order, and paho writes the UNSUBSCRIBE after
// the publishes already written). So a DDATA leaves the buffer only once
// the broker has it, as its PUBACK used to say at QoS 1.
func (s *session) confirm(ctx context.Context, l *mqtt.Link, toks []paho.Token) error {
	n := 0
	for _, tok := range toks {
		if tok == nil {
			continue
		}
		n++
		if err := l.Await(ctx, tok); err != nil {
			return err
		}
	}
	if n == 0 {
		return nil
	}
	if err := l.Await(ctx, l.Client().Unsubscribe(s.barrier)); err != nil {
		return fmt.Errorf("confirm: %w", err)
	}
	return nil
}

// dbirth hands d's DBIRTH to paho: every metric with its name, alias,
// datatype, engineering units and last value (is_null when none is
// known); s.mu is held.
func (s *session) dbirth(l *mqtt.Link, d *device) paho.Token {
	p := spb.Payload{Timestamp: s.stamp(), HasSeq: true, Seq: s.nextSeq()}
	for i, m := range d.metrics {
		sm := spb.Metric{Name: m.Name, Alias: d.alias[i], HasAlias: true, Type: m.Type, Timestamp: d.lastAt[i], Value: d.last[i]}
		if sm.Timestamp == 0 {
			sm.Timestamp = p.Timestamp
		}
		q := d.lastQ[i]
		if sm.Value.Kind == spb.NoValue {
			sm.Null, q = true, qualityBad
		}
		if m.Unit != "" {
			sm.Properties = &spb.PropertySet{}
			sm.Properties.Add("engUnit", spb.PropertyValue{Type: spb.String, Value: spb.StringOf(m.Unit)})
		}
		d.sentQ[i] = setQuality(&sm, q, qualityGood)
		p.Metrics = append(p.Metrics, sm)
		if d.alarm[i] != 0 {
			am := spb.Metric{Name: m.Name + alarmSuffix, Alias: d.alarm[i], HasAlias: true, Type: spb.Boolean, Timestamp: sm.Timestamp, Value: d.lastAlarm[i]}
			q := d.lastQ[i]
			if am.Value.Kind == spb.NoValue {
				am.Null, q = true, qualityBad
			}
			d.sentAlarmQ[i] = setQuality(&am, q, qualityGood)
			p.Metrics = append(p.Metrics, am)
		}
	}
	p.Metrics = append(p.Metrics,
		spb.Metric{Name: PacketSeq, Alias: d.seqAlias, HasAlias: true, Type: spb.UInt64, Timestamp: p.Timestamp, Null: true},
		spb.Metric{Name: packetEpoch, Alias: d.epochAlias, HasAlias: true, Type: spb.String, Timestamp: p.Timestamp, Null: true})
	return l.Client().Publish(spb.Topic(s.cfg.GroupID, spb.DBIRTH, s.cfg.EdgeNode, d.name), dataQoS, false, p.Marshal())
}

// ending publishes the NDEATH before a clean disconnect of l.
func (s *session) ending(l *mqtt.Link) error {
	s.mu.Lock()
	tok := l.Client().Publish(spb.Topic(s.cfg.GroupID, spb.NDEATH, s.cfg.EdgeNode, ""), 1, false, s.ndeath())
	s.mu.Unlock()
	return l.Await(context.Background(), tok)
}

func (s *session) setOnline(ctx context.Context, device string, online bool) error {
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
		d.last[i], d.lastAt[i], d.lastAlarm[i] = spb.Value{}, 0, spb.Value{}
	}
	v, l := s.mq(), s.born
	if l == nil || !l.Up() {
		s.mu.Unlock()
		return nil
	}
	var tok paho.Token
	if online {
		tok = s.dbirth(l, d)
	} else {
		p := spb.Payload{Timestamp: s.stamp(), HasSeq: true, Seq: s.nextSeq()}
		tok = l.Client().Publish(spb.Topic(s.cfg.GroupID, spb.DDEATH, s.cfg.EdgeNode, d.name), dataQoS, false, p.Marshal())
	}
	s.mu.Unlock()
	if err := s.confirm(ctx, l, []paho.Token{tok}); err != nil {
		return fmt.Errorf("uplink: mqtt %s: %w", v.name, err)
	}
	return nil
}
