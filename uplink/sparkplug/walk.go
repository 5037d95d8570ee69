package sparkplug

import (
	"context"
	"time"
)

// walk runs a node of several servers on one at a time, the first server
// first (Sparkplug 3.0: an edge node is never connected to more than one
// server). The node stays on a server until leave asks it to go: the
// primary host's STATE there says offline, or the connection failed or
// was lost. It then publishes its NDEATH, disconnects, and connects to
// the next server, after the last the first. A round of every server on
// which the node was born on none (the host offline everywhere, every
// server down) is followed by a pause, a connection's backoff (1 s
// doubling to 60 s), so that such a node does not spin; a birth starts
// the pauses over. Packets wait in the buffer meanwhile, and go out after
// the births on the next server, historical. The node's Run owns it.
func (s *session) walk(ctx context.Context) {
	attempt, round := 0, false
	for i := 0; ; i = (i + 1) % len(s.servers) {
		if i == 0 {
			s.mu.Lock()
			born := s.bornAny
			s.bornAny = false
			s.mu.Unlock()
			switch {
			case born:
				attempt = 0
			case round: // a round without a birth
				d := s.servers[0].up.Backoff(attempt)
				attempt++
				s.log.Warn("Sparkplug node born on none of its servers this round: waiting before the next",
					"servers", len(s.servers), "retry_in", d)
				t := time.NewTimer(d)
				select {
				case <-ctx.Done():
					t.Stop()
					return
				case <-t.C:
				}
			}
			round = true
		}
		v := s.servers[i]
		s.use(v)
		sctx, cancel := context.WithCancel(ctx)
		done := make(chan struct{})
		go func() {
			defer close(done)
			s.on(sctx, v)
		}()
		for left := false; !left && ctx.Err() == nil; {
			select {
			case <-ctx.Done():
			case w := <-s.walkc:
				left = w == v
			}
		}
		cancel()
		<-done
		if ctx.Err() != nil {
			return
		}
		s.log.Info("Sparkplug node leaves its server for the next", "upstream", v.name, "next", s.servers[(i+1)%len(s.servers)].name)
	}
}

// use makes v the server the node is on: nothing known of the host there
// yet (its STATE timestamps are the server's own), no connection, no
// births; a request to leave the previous server is forgotten.
func (s *session) use(v *server) {
	s.mu.Lock()
	s.hostTS, s.hostOnline, s.conn, s.born = 0, false, nil, nil
	s.mu.Unlock()
	s.srv.Store(v)
	for {
		select {
		case <-s.walkc:
		default:
			return
		}
	}
}

// leave asks walk to take the node off server v; it never blocks.
func (s *session) leave(v *server) {
	select {
	case s.walkc <- v:
	default:
	}
}

// down is called by v's Run loop when a connection failed or was lost: a
// node with other servers walks to the next.
func (s *session) down(v *server) {
	if len(s.servers) > 1 {
		s.leave(v)
	}
}
