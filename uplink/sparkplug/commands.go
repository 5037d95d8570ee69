package sparkplug

import (
	"context"
	"encoding/json"
	"fmt"
	"strings"
	"time"

	paho "github.com/eclipse/paho.mqtt.golang"

	spb "fieldlink/sparkplug"
)

// hostState applies a STATE message of the primary host (JSON
// {"online": bool, "timestamp": ms}, retained) that came through server
// v: one older than the latest valid one is ignored; online births the
// node on the current connection. Offline, once the host was online on
// this connection, ends the connection: with one server the broker
// publishes the NDEATH will, and Run connects again and waits for the
// host; with several the node publishes its NDEATH, disconnects and
// walks to the next server (see walk). With several servers an offline
// STATE found on a new connection (the host has no session on this
// server) walks on too; with one it only keeps the node waiting.
func (s *session) hostState(ctx context.Context, v *server, payload []byte) {
	var st struct {
		Online    *bool   `json:"online"`
		Timestamp *uint64 `json:"timestamp"`
	}
	if err := json.Unmarshal(payload, &st); err != nil || st.Online == nil || st.Timestamp == nil {
		s.log.Warn("Sparkplug STATE of the primary host unreadable: ignored", "upstream", v.name, "host", s.cfg.PrimaryHost, "err", err)
		return
	}
	s.mu.Lock()
	if *st.Timestamp < s.hostTS {
		s.mu.Unlock()
		s.log.Info("Sparkplug STATE older than the latest: ignored", "upstream", v.name, "host", s.cfg.PrimaryHost)
		return
	}
	s.hostTS = *st.Timestamp
	was := s.hostOnline
	s.hostOnline = *st.Online
	l := s.conn
	if *st.Online && !was {
		s.hostSince = time.Now()
	}
	s.mu.Unlock()
	if l == nil {
		return
	}
	walks := len(s.servers) > 1
	switch {
	case *st.Online && !was:
		s.log.Info("Sparkplug primary host online: births, then what was kept", "upstream", v.name, "host", s.cfg.PrimaryHost)
		if err := s.births(ctx, l); err != nil {
			s.log.Warn("births failed", "upstream", v.name, "err", err)
		}
	case !*st.Online && walks:
		s.log.Warn("Sparkplug primary host offline on this server: walking to the next; data waits in the buffer", "upstream", v.name, "host", s.cfg.PrimaryHost)
		s.leave(v)
	case !*st.Online && was:
		s.log.Warn("Sparkplug primary host offline: disconnecting; data waits in the buffer", "upstream", v.name, "host", s.cfg.PrimaryHost)
		l.Drop(fmt.Errorf("primary host %s offline", s.cfg.PrimaryHost))
	}
}

// onMessage runs on paho's router goroutine: it must not block. STATE and
// NCMD wait for run, DCMD for runCommands, each in a queue of its own.
func (s *session) onMessage(v *server, msg paho.Message) {
	in := incoming{srv: v}
	q, limit := s.cmds, stateMax
	if s.cfg.PrimaryHost != "" && msg.Topic() == spb.StateTopic(s.cfg.PrimaryHost) {
		in.state = true // retained, as it should be
	} else if msg.Retained() {
		s.log.Warn("retained Sparkplug command dropped: commands are never run late", "upstream", v.name, "topic", msg.Topic())
		return
	}
	if dev, ok := strings.CutPrefix(msg.Topic(), s.dcmd); ok {
		in.device, q, limit = dev, s.dcmds, MaxCommandBytes
	}
	if len(msg.Payload()) == 0 && !in.state {
		// Nothing to run; what the connection refused arrives so.
		s.log.Debug("empty Sparkplug command dropped", "upstream", v.name, "topic", msg.Topic())
		return
	}
	v.up.Admit("Sparkplug message", msg.Topic(), msg.Payload(), limit, queueLen, func(p []byte) bool {
		in.payload = p
		select {
		case q <- in:
			return true
		default:
			return false
		}
	})
}

// run handles NCMD and STATE, and follows the devices' health, until ctx
// ends; on owns it. DCMDs, whose writes may take long, are
// runCommands'.
func (s *session) run(ctx context.Context) {
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
			in.srv.up.Give(len(in.payload))
			if in.srv == s.mq() { // not a server the node has left
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

// runCommands runs DCMDs, one at a time, until ctx ends; on owns it.
func (s *session) runCommands(ctx context.Context) {
	for {
		select {
		case <-ctx.Done():
			return
		case in := <-s.dcmds:
			in.srv.up.Give(len(in.payload))
			s.command(ctx, in)
		}
	}
}

// handle applies a STATE or an NCMD.
func (s *session) handle(ctx context.Context, in incoming) {
	v := in.srv
	if in.state {
		s.hostState(ctx, v, in.payload)
		return
	}
	p, err := spb.Unmarshal(in.payload)
	if err != nil {
		s.log.Warn("Sparkplug NCMD refused", "upstream", v.name, "err", err)
		return
	}
	rb, ok := p.Metric(spb.Rebirth)
	if b, isBool := rb.Value.Bool(); !ok || !isBool || !b {
		s.log.Warn("NCMD without a true Node Control/Rebirth ignored", "upstream", v.name)
		return
	}
	s.mu.Lock()
	l := s.born
	s.mu.Unlock()
	if l == nil || !l.Up() {
		return // not born on this connection: it births when it may
	}
	if err := s.births(ctx, l); err != nil {
		s.log.Warn("rebirth failed", "upstream", v.name, "err", err)
	}
}

// command hands a DCMD to OnCommand: its metrics named from their
// aliases and typed from the DBIRTH, or why it is refused whole.
func (s *session) command(ctx context.Context, in incoming) {
	if s.cfg.OnCommand == nil {
		s.log.Warn("DCMD refused: no command handler", "upstream", in.srv.name, "device", in.device)
		return
	}
	cmd := Command{Device: in.device, Payload: in.payload}
	p, err := spb.Unmarshal(in.payload)
	d := s.devs[in.device]
	switch {
	case err != nil:
		cmd.Refused = "DCMD unreadable: " + err.Error()
	case d == nil:
		cmd.Refused = fmt.Sprintf("DCMD for %q, not a device of this node", in.device)
	case len(p.Metrics) > MaxCommandMetrics:
		cmd.Refused = fmt.Sprintf("DCMD of %d metrics, more than %d: nothing written", len(p.Metrics), MaxCommandMetrics)
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
