package mqtt

import (
	"context"
	"encoding/json"
	"fmt"
	"strings"
	"time"

	paho "github.com/eclipse/paho.mqtt.golang"

	"fieldlink/sparkplug"
)

// hostState applies a STATE message of the primary host (JSON
// {"online": bool, "timestamp": ms}, retained) that came through server
// m: one older than the latest valid one is ignored; online births the
// node on the current connection. Offline, once the host was online on
// this connection, ends the connection: with one server the broker
// publishes the NDEATH will, and Run connects again and waits for the
// host; with several the node publishes its NDEATH, disconnects and
// walks to the next server (see walk). With several servers an offline
// STATE found on a new connection (the host has no session on this
// server) walks on too; with one it only keeps the node waiting.
func (s *sparkplugSession) hostState(ctx context.Context, m *mqttUpstream, payload []byte) {
	var st struct {
		Online    *bool   `json:"online"`
		Timestamp *uint64 `json:"timestamp"`
	}
	if err := json.Unmarshal(payload, &st); err != nil || st.Online == nil || st.Timestamp == nil {
		s.log.Warn("Sparkplug STATE of the primary host unreadable: ignored", "upstream", m.name, "host", s.cfg.PrimaryHost, "err", err)
		return
	}
	s.mu.Lock()
	if *st.Timestamp < s.hostTS {
		s.mu.Unlock()
		s.log.Info("Sparkplug STATE older than the latest: ignored", "upstream", m.name, "host", s.cfg.PrimaryHost)
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
	walks := len(s.servers) > 1
	switch {
	case *st.Online && !was:
		s.log.Info("Sparkplug primary host online: births, then what was kept", "upstream", m.name, "host", s.cfg.PrimaryHost)
		if err := s.births(ctx, c); err != nil {
			s.log.Warn("births failed", "upstream", m.name, "err", err)
		}
	case !*st.Online && walks:
		s.log.Warn("Sparkplug primary host offline on this server: walking to the next; data waits in the buffer", "upstream", m.name, "host", s.cfg.PrimaryHost)
		s.leave(m)
	case !*st.Online && was:
		s.log.Warn("Sparkplug primary host offline: disconnecting; data waits in the buffer", "upstream", m.name, "host", s.cfg.PrimaryHost)
		c.drop(fmt.Errorf("primary host %s offline", s.cfg.PrimaryHost))
	}
}

// onMessage runs on paho's router goroutine: it must not block. STATE and
// NCMD wait for run, DCMD for runCommands, each in a queue of its own.
func (s *sparkplugSession) onMessage(m *mqttUpstream, msg paho.Message) {
	in := spIncoming{m: m}
	q, limit := s.cmds, sparkplugStateMax
	if s.cfg.PrimaryHost != "" && msg.Topic() == sparkplug.StateTopic(s.cfg.PrimaryHost) {
		in.state = true // retained, as it should be
	} else if msg.Retained() {
		s.log.Warn("retained Sparkplug command dropped: commands are never run late", "upstream", m.name, "topic", msg.Topic())
		return
	}
	if dev, ok := strings.CutPrefix(msg.Topic(), s.dcmd); ok {
		in.device, q, limit = dev, s.dcmds, SparkplugMaxCommandBytes
	}
	p := msg.Payload()
	switch {
	case len(p) == 0 && !in.state:
		// Nothing to run; what the connection refused arrives so.
		s.log.Debug("empty Sparkplug command dropped", "upstream", m.name, "topic", msg.Topic())
		return
	case len(p) > limit:
		m.oversize.note(s.log, "Sparkplug message over the size limit refused", "upstream", m.name, "topic", msg.Topic(), "bytes", len(p), "limit", limit)
		return
	case !m.take(len(p)):
		m.dropped.note(s.log, "Sparkplug message dropped: too many bytes waiting", "upstream", m.name, "topic", msg.Topic(), "waiting_bytes", mqttInboundBytes)
		return
	}
	in.payload = append([]byte(nil), p...)
	select {
	case q <- in:
	default:
		m.give(len(p))
		m.dropped.note(s.log, "Sparkplug message dropped: too many waiting", "upstream", m.name, "topic", msg.Topic(), "waiting", subscriptionQueue)
	}
}

// run handles NCMD and STATE, and follows the devices' health, until ctx
// ends; [mqttUpstream.Run] owns it. DCMDs, whose writes may take long, are
// runCommands'.
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
			in.m.give(len(in.payload))
			if in.m == s.mq() { // not a server the node has left
				s.handle(ctx, in)
			}
		case <-tick:
			for dev, on := range s.cfg.Online() {
				if err := s.setOnline(ctx, dev, on); err != nil {
					s.log.Warn("Sparkplug device state not published", "upstream", s.mq().name, "device", dev, "online", on, "err", err)
				}
			}
		}
	}
}

// runCommands runs DCMDs, one at a time, until ctx ends; [mqttUpstream.Run] owns
// it.
func (s *sparkplugSession) runCommands(ctx context.Context) {
	for {
		select {
		case <-ctx.Done():
			return
		case in := <-s.dcmds:
			in.m.give(len(in.payload))
			s.command(ctx, in)
		}
	}
}

// handle applies a STATE or an NCMD.
func (s *sparkplugSession) handle(ctx context.Context, in spIncoming) {
	m := in.m
	if in.state {
		s.hostState(ctx, m, in.payload)
		return
	}
	p, err := sparkplug.Unmarshal(in.payload)
	if err != nil {
		s.log.Warn("Sparkplug NCMD refused", "upstream", m.name, "err", err)
		return
	}
	rb, ok := p.Metric(sparkplug.Rebirth)
	if b, isBool := rb.Value.Bool(); !ok || !isBool || !b {
		s.log.Warn("NCMD without a true Node Control/Rebirth ignored", "upstream", m.name)
		return
	}
	s.mu.Lock()
	c := s.born
	s.mu.Unlock()
	if c == nil || c != m.conn() {
		return // not born on this connection: it births when it may
	}
	if err := s.births(ctx, c); err != nil {
		s.log.Warn("rebirth failed", "upstream", m.name, "err", err)
	}
}

// command hands a DCMD to OnCommand: its metrics named from their
// aliases and typed from the DBIRTH, or why it is refused whole.
func (s *sparkplugSession) command(ctx context.Context, in spIncoming) {
	if s.cfg.OnCommand == nil {
		s.log.Warn("DCMD refused: no command handler", "upstream", in.m.name, "device", in.device)
		return
	}
	cmd := SparkplugCommand{Device: in.device, Payload: in.payload}
	p, err := sparkplug.Unmarshal(in.payload)
	d := s.devs[in.device]
	switch {
	case err != nil:
		cmd.Refused = "DCMD unreadable: " + err.Error()
	case d == nil:
		cmd.Refused = fmt.Sprintf("DCMD for %q, not a device of this node", in.device)
	case len(p.Metrics) > SparkplugMaxCommandMetrics:
		cmd.Refused = fmt.Sprintf("DCMD of %d metrics, more than %d: nothing written", len(p.Metrics), SparkplugMaxCommandMetrics)
	}
	if cmd.Refused != "" {
		s.cfg.OnCommand(ctx, cmd)
		return
	}
	cmd.Seq, cmd.At, cmd.Metrics = p.Seq, p.Timestamp, p.Metrics
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
	s.cfg.OnCommand(ctx, cmd)
}
