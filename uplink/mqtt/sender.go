package mqtt

import (
	"bytes"
	"context"
	"fmt"
	"sync"
	"time"

	"fieldlink/buffer"
)

// The senders adapt the publishers (MQTT, HTTP) to the delivery loop's
// [Sender].

// mqttSender adapts an MQTT publisher to the delivery loop: one record
// per Send, pipelined up to the window.
type mqttSender struct {
	m      *mqttUpstream
	window int

	mu   sync.Mutex
	vars map[string]map[string]string // by DataType and DeviceId, to spare a map per publish
}

// topicVars returns the (shared, read-only) template values of a packet.
func (s *mqttSender) topicVars(data []byte) map[string]string {
	dt, dev := headField(data, `"DataType":"`), headField(data, `"DeviceId":"`)
	key := dt + "\x00" + dev
	s.mu.Lock()
	defer s.mu.Unlock()
	v, ok := s.vars[key]
	if !ok {
		if s.vars == nil || len(s.vars) > 4096 {
			s.vars = map[string]map[string]string{}
		}
		v = map[string]string{"data_type": dt, "device": dev}
		s.vars[key] = v
	}
	return v
}

// newMQTTSender returns the sender of m with up to window publishes in
// flight; window ≤ 0 means m's own [mqttConfig.Window].
func newMQTTSender(m *mqttUpstream, window int) *mqttSender {
	if window <= 0 {
		window = m.window()
	}
	return &mqttSender{m: m, window: window}
}

// Name implements Sender.
func (s *mqttSender) Name() string { return s.m.Name() }

// Send publishes each record and waits for its PUBACK.
func (s *mqttSender) Send(ctx context.Context, batch []buffer.Record) error {
	for _, r := range batch {
		if err := s.m.publish(ctx, s.topicVars(r.Data), r.Data); err != nil {
			return fmt.Errorf("publish seq %d: %w", r.Seq, err)
		}
	}
	return nil
}

// MaxBatch implements Sender: one record, so each is acked on its own.
func (s *mqttSender) MaxBatch() int { return 1 }

// Window implements Sender.
func (s *mqttSender) Window() int { return s.window }

// Up implements Sender: connected.
func (s *mqttSender) Up() bool { return s.m.Connected() }

// LastError is the latest reason the broker connection failed or ended,
// in words, and when; it stays after a reconnect.
func (s *mqttSender) LastError() (string, time.Time) { return s.m.lastError() }

// headField returns the string value that follows key in a packet's JSON,
// as the packet encoder writes it, or "" if there is none.
func headField(data []byte, key string) string {
	i := bytes.Index(data, []byte(key))
	if i < 0 {
		return ""
	}
	rest := data[i+len(key):]
	j := bytes.IndexByte(rest, '"')
	if j < 0 {
		return ""
	}
	return string(rest[:j])
}
