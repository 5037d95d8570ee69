package uplink

import (
	"errors"
	"fmt"
	"strings"
	"time"

	"github.com/eclipse/paho.mqtt.golang/packets"
)

func init() {
	Register([]string{"mqtt", "mqtts"}, []Encoding{EncodingJSON, EncodingInfluxLine, EncodingSparkplugB}, mqttKind{})
}

// mqttKind is the kind of MQTT upstreams, and of Sparkplug B edge nodes
// (an upstream with a [UpstreamConfig.Sparkplug]).
type mqttKind struct{}

func (mqttKind) Name(raw string) (string, error) {
	addr, _, err := mqttParseURL(raw)
	if err != nil {
		return "", fmt.Errorf("uplink: mqtt: %w", err)
	}
	scheme, _, _ := strings.Cut(raw, "://")
	return scheme + "://" + addr, nil
}

func (mqttKind) Open(u UpstreamConfig, pc PoolConfig) (*Conn, error) {
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
		return nil, err
	}
	c := &Conn{
		Sender: newMQTTSender(mq, pc.Window),
		Run:    mq.Run,
		ProbeResult: func(err error) {
			if err == nil && !mq.Connected() {
				mq.Kick() // the broker answers again: reconnect now
			}
		},
		Publish:   mq.PublishTo,
		Connected: mq.Connected,
		NewProber: func(topic string, interval, timeout time.Duration, report func(time.Duration, error)) *Prober {
			return newMQTTProber(mq, topic, interval, timeout, report)
		},
	}
	if u.Sparkplug != nil {
		// A Sparkplug B edge node publishes only under spBv1.0/ and only
		// its births, deaths and data: a host application or a broker
		// that enforces the namespace would take any other topic for a
		// fault (or deny it), so its probes stay TCP connects.
		c.NewProber = nil
		if c.Sender, err = newSparkplug(mq, *u.Sparkplug, pc.Window); err != nil {
			return nil, err
		}
	}
	return c, nil
}

// Explain says the broker's refusals and the connection's own failures.
func (mqttKind) Explain(err error) (string, bool) {
	switch {
	case errors.Is(err, ErrMQTTClientIDInUse):
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
