package sparkplug

import (
	"context"
	"fmt"
	"time"

	paho "github.com/eclipse/paho.mqtt.golang"

	"fieldlink/buffer"
	"fieldlink/packet"
	topictmpl "fieldlink/uplink/internal/topic"
)

// node is the delivery loop's sender for a Sparkplug B upstream: each
// record, a packet of one device, goes out as a DDATA by alias, and leaves
// the buffer once the DDATA of every record of its batch was acknowledged.
// A record with no field that is a metric of its device (a command's
// record) leaves the buffer unsent.
type node struct {
	s      *session
	window int
}

// Name implements Sender.
// The node is known by its first server, whatever server it is on.
func (sp *node) Name() string { return sp.s.servers[0].name }

// MaxBatch implements Sender: a batch's records are published in order,
// pipelined, up to the upstream's window.
func (sp *node) MaxBatch() int { return sp.window }

// Window implements Sender: one batch at a time, so that the packets go
// out in the buffer's order (oldest first, after an outage), as
// store-and-forward wants; concurrent batches would race for the seq.
func (sp *node) Window() int { return 1 }

// Up implements Sender: connected, births sent (with a primary host: it
// is online). While it is not, the packets wait in the buffer.
func (sp *node) Up() bool {
	s := sp.s
	s.mu.Lock()
	l := s.born
	s.mu.Unlock()
	return l != nil && l.Up()
}

// LastError is the latest failure of the server the node is on.
func (sp *node) LastError() (string, time.Time) { return sp.s.mq().up.LastError() }

// Send publishes the records as DDATA, in order, pipelined, and returns
// nil once the broker acknowledged every one. A record that is no packet,
// or a packet of a device that is not the node's, fails the batch at once
// with a permanent error, before anything is published.
func (sp *node) Send(ctx context.Context, batch []buffer.Record) error {
	s := sp.s
	v := s.mq()
	pks := make([]*packet.Packet, len(batch))
	for i, r := range batch {
		pk, err := packet.Decode(r.Data)
		if err == nil && s.devs[pk.DeviceID] == nil {
			err = fmt.Errorf("device %q is not one of the node's", pk.DeviceID)
		}
		if err != nil {
			return topictmpl.Wrap(fmt.Errorf("uplink: mqtt %s: sparkplug: publish seq %d: %w", v.name, r.Seq, err))
		}
		pks[i] = pk
	}
	s.mu.Lock()
	l := s.born
	if l == nil || !l.Up() {
		s.mu.Unlock()
		return v.up.NotConnected()
	}
	toks := make([]paho.Token, len(pks))
	for i, pk := range pks {
		toks[i] = s.ddata(l, s.devs[pk.DeviceID], pk)
	}
	s.mu.Unlock()
	if err := s.confirm(ctx, l, toks); err != nil {
		return fmt.Errorf("uplink: mqtt %s: publish seqs %d to %d: %w", v.name, batch[0].Seq, batch[len(batch)-1].Seq, err)
	}
	return nil
}

// SetOnline tells the node that device went offline (a DDEATH is
// published, its last values are forgotten: they are stale) or came back
// (a DBIRTH, its metrics null until a reading arrives). A repeated state
// publishes nothing. Without a connection the state is kept for the next
// births.
func (sp *node) SetOnline(ctx context.Context, device string, online bool) error {
	return sp.s.setOnline(ctx, device, online)
}
