package mqtt

import (
	"context"
	"errors"
	"fmt"
	"sync"
	"time"

	paho "github.com/eclipse/paho.mqtt.golang"

	"fieldlink/buffer"
	"fieldlink/packet"
	topictmpl "fieldlink/uplink/internal/topic"
)

// sparkplugNode is the delivery loop's sender for a Sparkplug B upstream: each
// record, a packet of one device, goes out as a DDATA by alias, and leaves
// the buffer once the DDATA of every record of its batch was acknowledged.
// A record with no field that is a metric of its device (a command's
// record) leaves the buffer unsent.
type sparkplugNode struct {
	s      *sparkplugSession
	window int
}

// Name implements Sender.
// The node is known by its first server, whatever server it is on.
func (sp *sparkplugNode) Name() string { return sp.s.servers[0].Name() }

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
	c := s.mq().conn()
	s.mu.Lock()
	defer s.mu.Unlock()
	return c != nil && c == s.born
}

// LastError is the latest failure of the server the node is on.
func (sp *sparkplugNode) LastError() (string, time.Time) { return sp.s.mq().lastError() }

// MQTT is the connection of the server the node is on.
func (sp *sparkplugNode) MQTT() *mqttUpstream { return sp.s.mq() }

// Send publishes the records as DDATA, in order, pipelined, and returns
// nil once the broker acknowledged every one. A record that is no packet,
// or a packet of a device that is not the node's, fails the batch at once
// with a permanent error, before anything is published.
func (sp *sparkplugNode) Send(ctx context.Context, batch []buffer.Record) error {
	s := sp.s
	m := s.mq()
	pks := make([]*packet.Packet, len(batch))
	for i, r := range batch {
		pk, err := packet.Decode(r.Data)
		if err == nil && s.devs[pk.DeviceID] == nil {
			err = fmt.Errorf("device %q is not one of the node's", pk.DeviceID)
		}
		if err != nil {
			return topictmpl.Wrap(fmt.Errorf("uplink: mqtt %s: sparkplug: publish seq %d: %w", m.name, r.Seq, err))
		}
		pks[i] = pk
	}
	s.mu.Lock()
	c := m.conn()
	if c == nil || c != s.born {
		s.mu.Unlock()
		return m.notConnected()
	}
	toks := make([]paho.Token, len(pks))
	for i, pk := range pks {
		toks[i] = s.ddata(c, s.devs[pk.DeviceID], pk)
	}
	s.mu.Unlock()
	if err := s.confirm(ctx, m, c, toks); err != nil {
		return fmt.Errorf("uplink: mqtt %s: publish seqs %d to %d: %w", m.name, batch[0].Seq, batch[len(batch)-1].Seq, err)
	}
	return nil
}

// SetOnline tells the node that device went offline (a DDEATH is
// published, its last values are forgotten: they are stale) or came back
// (a DBIRTH, its metrics null until a reading arrives). A repeated state
// publishes nothing. Without a connection the state is kept for the next
// births.
func (sp *sparkplugNode) SetOnline(ctx context.Context, device string, online bool) error {
	return sp.s.setOnline(ctx, device, online)
}

// newSparkplug makes m a Sparkplug B edge node ([SparkplugConfig]) and
// returns its sender: m is its first server, cfg.Servers the others, each
// a connection made like m's. Call it before m's Run.
func newSparkplug(m *mqttUpstream, cfg SparkplugConfig, window int) (*sparkplugNode, error) {
	if m.running.Load() {
		return nil, errors.New("uplink: sparkplug: the MQTT upstream already runs")
	}
	s, err := newSparkplugSession(cfg, m.log)
	if err != nil {
		return nil, fmt.Errorf("uplink: mqtt %s: %w", m.name, err)
	}
	// A node publishes nothing but its births, deaths and data: the
	// status topic's retained "online" would come before its NBIRTH
	// (tck-id-principles-birth-certificates-order). NBIRTH and NDEATH
	// say whether it is up.
	m.status = ""
	s.servers = []*mqttUpstream{m}
	for _, sv := range cfg.Servers {
		mc := m.cfg
		mc.URL, mc.Username, mc.Password, mc.TLS = sv.URL, sv.Username, sv.Password, sv.TLS
		mc.LoadTopic, mc.OnLoad = "", nil // the load reports are the first server's
		o, err := newMQTT(mc)
		if err != nil {
			return nil, fmt.Errorf("uplink: sparkplug %s: server %w", m.name, err)
		}
		o.backoffMin, o.backoffMax, o.stallAge = m.backoffMin, m.backoffMax, m.stallAge
		o.status = ""
		s.servers = append(s.servers, o)
	}
	for _, o := range s.servers {
		o.hook = s
	}
	s.srv.Store(m)
	if window <= 0 {
		window = m.window()
	}
	return &sparkplugNode{s: s, window: window}, nil
}

// The session is its servers' [mqttHook].

func (s *sparkplugSession) runs(ctx context.Context) bool {
	if len(s.servers) < 2 {
		return false
	}
	s.walk(ctx)
	return true
}

func (s *sparkplugSession) serving(ctx context.Context, wg *sync.WaitGroup) {
	wg.Go(func() { s.run(ctx) })
	wg.Go(func() { s.runCommands(ctx) })
}

func (s *sparkplugSession) inboundLimit() int {
	return max(sparkplugStateMax, SparkplugMaxCommandBytes)
}
