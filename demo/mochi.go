package demo

import (
	"log/slog"
	"sync/atomic"

	mqtt "github.com/mochi-mqtt/server/v2"
	"github.com/mochi-mqtt/server/v2/hooks/auth"
	"github.com/mochi-mqtt/server/v2/listeners"
	"github.com/mochi-mqtt/server/v2/packets"
)

// demoServerKind names the broker in the demo's banner.
const demoServerKind = "an embedded mochi broker"

// mochiServer is a demo broker's server: an embedded mochi broker that
// lets every client in.
type mochiServer struct {
	srv *mqtt.Server
	tcp *listeners.TCP
}

// newDemoServer starts a mochi broker on a loopback port; onData sees the
// payload of every message published under fieldlink/.
func newDemoServer(name string, log *slog.Logger, onData func(payload []byte)) (demoServer, error) {
	s := &mochiServer{srv: mqtt.New(&mqtt.Options{InlineClient: true, Logger: log})}
	if err := s.srv.AddHook(new(auth.AllowHook), nil); err != nil {
		return nil, err
	}
	s.tcp = listeners.NewTCP(listeners.Config{ID: name, Address: "127.0.0.1:0"})
	if err := s.srv.AddListener(s.tcp); err != nil {
		return nil, err
	}
	if err := s.srv.Serve(); err != nil {
		return nil, err
	}
	err := s.srv.Subscribe("fieldlink/#", 1, func(_ *mqtt.Client, _ packets.Subscription, pk packets.Packet) {
		onData(pk.Payload)
	})
	if err != nil {
		_ = s.srv.Close()
		return nil, err
	}
	return s, nil
}

func (s *mochiServer) addr() string { return s.tcp.Address() }

func (s *mochiServer) publishRetained(topic string, payload []byte) error {
	return s.srv.Publish(topic, payload, true, 0)
}

func (s *mochiServer) publish(topic string, payload []byte) error {
	return s.srv.Publish(topic, payload, false, 1)
}

func (s *mochiServer) clients() int {
	return int(atomic.LoadInt64(&s.srv.Info.ClientsConnected))
}

func (s *mochiServer) close() { _ = s.srv.Close() }
