package sparkplug

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"sync"

	"fieldlink/uplink"
	"fieldlink/uplink/mqtt"
	"fieldlink/uplink/site"
)

// Bounds of what a node takes in from its servers, besides DCMDs
// ([MaxCommandBytes]).
const (
	// stateMax bounds a primary host's STATE message and an NCMD: a
	// small JSON object, a rebirth request.
	stateMax = 4 << 10
	// queueLen is how many STATE and NCMD messages, and how many DCMDs,
	// may wait for the node, as many as for an MQTT subscription.
	queueLen = 16
)

// Kind is the kind of Sparkplug B edge nodes: MQTT upstreams whose
// encoding is sparkplug_b and whose Options are a *[Config].
type Kind struct{}

// Name is the MQTT upstream's name: the node is known by its first
// server.
func (Kind) Name(raw string) (string, error) { return mqtt.Kind{}.Name(raw) }

// Open makes the node of u, whose Options are its *[Config]: u is its
// first server, Config.Servers the others, each an MQTT connection made
// like u's, with the same client id, on which the node is one server at
// a time.
func (Kind) Open(u uplink.UpstreamConfig, pc uplink.PoolConfig) (*uplink.Conn, error) {
	cfg, ok := u.Options.(*Config)
	if !ok || cfg == nil {
		return nil, errors.New("uplink: sparkplug: an upstream with encoding sparkplug_b needs its node's settings")
	}
	// A node publishes nothing but its births, deaths and data: the
	// status topic's retained "online" would come before its NBIRTH
	// (tck-id-principles-birth-certificates-order). NBIRTH and NDEATH
	// say whether it is up.
	pc.StatusTopic = site.Off
	first := &server{}
	c, up, err := mqtt.Open(u, pc, first)
	if err != nil {
		return nil, err
	}
	log := pc.Logger
	if log == nil {
		log = slog.Default()
	}
	s, err := newSession(*cfg, log)
	if err != nil {
		return nil, fmt.Errorf("uplink: mqtt %s: %w", up.Name(), err)
	}
	*first = server{s: s, up: up, name: up.Name()}
	s.servers = []*server{first}
	for _, sv := range cfg.Servers {
		v := &server{s: s}
		o, err := up.Another(sv.URL, sv.Username, sv.Password, sv.TLS, v)
		if err != nil {
			return nil, fmt.Errorf("uplink: sparkplug %s: server %w", up.Name(), err)
		}
		v.up, v.name = o, o.Name()
		s.servers = append(s.servers, v)
	}
	s.srv.Store(first)
	c.Sender = &node{s: s, window: c.Sender.Window()}
	c.Run = s.serve
	// A Sparkplug B edge node publishes only under spBv1.0/ and only its
	// births, deaths and data: a host application or a broker that
	// enforces the namespace would take any other topic for a fault (or
	// deny it), so its probes stay TCP connects.
	c.NewProber = nil
	return c, nil
}

// Explain: a node's errors are its connections', which the MQTT kind says.
func (Kind) Explain(error) (string, bool) { return "", false }

// server is one MQTT server of the node, and the hook the node puts on
// its connection ([mqtt.Hook]).
type server struct {
	s    *session
	up   *mqtt.Upstream
	name string
}

func (v *server) Will() (string, []byte) { return v.s.will() }

func (v *server) Connected(ctx context.Context, l *mqtt.Link) error { return v.s.connected(ctx, v, l) }

func (v *server) Ending(l *mqtt.Link) {
	if err := v.s.ending(l); err != nil {
		v.s.log.Warn("mqtt NDEATH not acknowledged; the broker publishes the will", "upstream", v.name, "err", err)
	}
}

func (v *server) Down() { v.s.down(v) }

func (v *server) InboundLimit() int { return max(stateMax, MaxCommandBytes) }

// serve runs the node until ctx ends: on its one server, or on each of
// its servers in turn (see walk). It is the node's Run.
func (s *session) serve(ctx context.Context) {
	if len(s.servers) > 1 {
		s.walk(ctx)
		return
	}
	s.on(ctx, s.servers[0])
}

// on runs the node on server v until ctx ends: v's connection, and the
// node's loops over what comes through it (run, runCommands).
func (s *session) on(ctx context.Context, v *server) {
	var wg sync.WaitGroup
	defer wg.Wait()
	wg.Go(func() { s.run(ctx) })
	wg.Go(func() { s.runCommands(ctx) })
	v.up.Run(ctx)
}
