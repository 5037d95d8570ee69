package mqtt

import (
	"errors"
	"fmt"
	"strings"
	"time"

	"fieldlink/uplink"
	"fieldlink/uplink/internal/probe"
	"github.com/eclipse/paho.mqtt.golang/packets"
)

// Kind is the kind of MQTT upstreams.
type Kind struct{}

func (Kind) Name(raw string) (string, error) {
	addr, _, err := mqttParseURL(raw)
	if err != nil {
		return "", fmt.Errorf("uplink: mqtt: %w", err)
	}
	scheme, _, _ := strings.Cut(raw, "://")
	return scheme + "://" + addr, nil
}

func (Kind) Open(u uplink.UpstreamConfig, pc uplink.PoolConfig) (*uplink.Conn, error) {
	c, _, err := open(u, pc, nil)
	return c, err
}

// open makes the upstream u of a pool configured by pc, with hook h on its
// connection (nil: none), as [Kind.Open] and [Open] do.
func open(u uplink.UpstreamConfig, pc uplink.PoolConfig, h Hook) (*uplink.Conn, *mqttUpstream, error) {
	mc := mqttConfig{
		URL: u.URL, Topic: u.Topic, Window: pc.Window, Username: u.Username, Password: u.Password, TLS: u.TLS,
		Logger: pc.Logger, Vars: pc.Vars, AtMostOnce: u.AtMostOnce, StatusTopic: pc.StatusTopic,
		Subscriptions: pc.Subscriptions, PublishTimeout: u.Timeout,
	}
	if u.LoadTopic != "" {
		mc.LoadTopic = u.LoadTopic
		mc.OnLoad = u.OnLoad
	}
	mq, err := newMQTT(mc)
	if err != nil {
		return nil, nil, err
	}
	mq.hook = h
	c := &uplink.Conn{
		Sender: newMQTTSender(mq, pc.Window),
		Run:    mq.Run,
		ProbeResult: func(err error) {
			if err == nil && !mq.Connected() {
				mq.Kick() // the broker answers again: reconnect now
			}
		},
		Publish:   mq.PublishTo,
		Connected: mq.Connected,
		NewProber: func(topic string, interval, timeout time.Duration, report func(time.Duration, error)) *probe.Prober {
			return newMQTTProber(mq, topic, interval, timeout, report)
		},
	}
	return c, mq, nil
}

// Explain says the broker's refusals and the connection's own failures.
func (Kind) Explain(err error) (string, bool) {
	switch {
	case errors.Is(err, ErrClientIDInUse):
		return err.Error(), true
	case errors.Is(err, packets.ErrorRefusedBadUsernameOrPassword), errors.Is(err, packets.ErrorRefusedNotAuthorised):
		return "the broker refuses the user name or password", true
	case errors.Is(err, packets.ErrorRefusedIDRejected):
		return "the broker refuses this gateway's client id", true
	case errors.Is(err, packets.ErrorRefusedServerUnavailable):
		return "the broker says it is unavailable", true
	case errors.Is(err, errMQTTAckTimeout):
		return "the broker did not acknowledge a packet in time; the connection is made again", true
	}
	return "", false
}

// newMQTTProber returns a prober of m's broker: a QoS 1 publish of an empty
// message on topic, timed to its PUBACK, while m is connected, and a TCP
// connect to the broker while it is not (see [probe.Prober]). interval, timeout
// and report are as for [probe.New]. The publish does not wait for a
// window slot of m's packets; a PUBACK later than the probe's timeout
// fails the probe, and drops the connection only past m's publish
// timeout, as a packet's would.
func newMQTTProber(m *mqttUpstream, topic string, interval, timeout time.Duration, report func(rtt time.Duration, err error)) *probe.Prober {
	return probe.NewPublish(m, m.addr, topic, interval, timeout, m.log, report)
}
