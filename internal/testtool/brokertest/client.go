// Package brokertest is the MQTT test plumbing that the test tiers share:
// a Client for the platform's side (publish, subscribe), a Subscriber that
// takes every message a broker delivers, and a Proxy (an in-process
// toxiproxy) between the gateway and a broker. It is for tests only: every
// failure is the test's.
package brokertest

import (
	"errors"
	"fmt"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	paho "github.com/eclipse/paho.mqtt.golang"
)

// Options say how a Client or a Subscriber connects. The zero value, with a
// broker, is the usual test client: MQTT 3.1.1, a clean session, no
// automatic reconnection, a random client id.
type Options struct {
	// Name names the client in failure messages ("subscriber A",
	// "platform"); "client" when empty.
	Name string
	// ID is the MQTT client id; a unique one when empty.
	ID string
	// Brokers are host:port; paho connects to the first that answers.
	Brokers []string
	// Username and Password, when Username is set, log the client in.
	Username, Password string
	// Persistent asks for a persistent session (CleanSession false).
	Persistent bool
	// Reconnect lets paho retry the first connection and reconnect by
	// itself after a lost one, every MaxReconnectInterval at most.
	Reconnect            bool
	MaxReconnectInterval time.Duration
	// Unordered hands messages to the handlers concurrently (paho's
	// OrderMatters false).
	Unordered bool
	// ConnectTimeout is paho's, 10 s when zero; KeepAlive is paho's when
	// not zero.
	ConnectTimeout time.Duration
	KeepAlive      time.Duration
	// Wait is how long Connect, Subscribe and Publish may take: 15 s
	// when zero.
	Wait time.Duration
	// Lost is told of a lost connection, unless the client is closing.
	Lost func(err error)
	// Connected is called at every connection made.
	Connected func()
	// Quiesce is what Close gives paho to finish its work, in ms.
	Quiesce uint

	// fallback takes the messages no subscription of this connection
	// routes: a persistent session's, delivered at its connection before
	// the subscription is made again.
	fallback Handler
}

// Handler takes one message.
type Handler func(topic string, payload []byte)

// Client is a paho client connected to a broker.
type Client struct {
	o       Options
	c       paho.Client
	closing atomic.Bool
}

var ids atomic.Int64

func (o Options) name() string {
	if o.Name == "" {
		return "client"
	}
	return o.Name
}

func (o Options) wait() time.Duration {
	if o.Wait == 0 {
		return 15 * time.Second
	}
	return o.Wait
}

// Dial connects a client, or says why it could not; the caller closes it.
func Dial(o Options) (*Client, error) {
	if len(o.Brokers) == 0 {
		return nil, errors.New("no broker")
	}
	c := &Client{o: o}
	po := paho.NewClientOptions()
	for _, b := range o.Brokers {
		po.AddBroker("tcp://" + b)
	}
	id := o.ID
	if id == "" {
		id = fmt.Sprintf("brokertest-%d-%d", time.Now().UnixNano(), ids.Add(1))
	}
	po.SetClientID(id)
	po.SetProtocolVersion(4)
	po.SetCleanSession(!o.Persistent)
	po.SetAutoReconnect(o.Reconnect)
	po.SetConnectRetry(o.Reconnect)
	if o.MaxReconnectInterval > 0 {
		po.SetMaxReconnectInterval(o.MaxReconnectInterval)
	}
	po.SetOrderMatters(!o.Unordered)
	po.SetConnectTimeout(10 * time.Second)
	if o.ConnectTimeout > 0 {
		po.SetConnectTimeout(o.ConnectTimeout)
	}
	if o.KeepAlive > 0 {
		po.SetKeepAlive(o.KeepAlive)
	}
	if o.Username != "" {
		po.SetUsername(o.Username)
		po.SetPassword(o.Password)
	}
	po.SetConnectionLostHandler(func(_ paho.Client, err error) {
		if o.Lost != nil && !c.closing.Load() {
			o.Lost(err)
		}
	})
	if o.fallback != nil {
		po.SetDefaultPublishHandler(func(_ paho.Client, m paho.Message) { o.fallback(m.Topic(), m.Payload()) })
	}
	if o.Connected != nil {
		po.SetOnConnectHandler(func(paho.Client) { o.Connected() })
	}
	c.c = paho.NewClient(po)
	tok := c.c.Connect()
	if !tok.WaitTimeout(o.wait()) {
		c.c.Disconnect(0)
		return nil, fmt.Errorf("no answer within %v", o.wait())
	}
	if err := tok.Error(); err != nil {
		return nil, err
	}
	return c, nil
}

// NewClient connects a client, or fails the test; it is closed when the
// test ends.
func NewClient(t testing.TB, o Options) *Client {
	t.Helper()
	c, err := Dial(o)
	if err != nil {
		t.Fatalf("%s: connect to %s: %v", o.name(), strings.Join(o.Brokers, ", "), err)
	}
	t.Cleanup(c.Close)
	return c
}

// Paho is the paho client, for what this type does not say.
func (c *Client) Paho() paho.Client { return c.c }

// Close disconnects the client; a lost connection is no longer told.
func (c *Client) Close() {
	c.closing.Store(true)
	c.c.Disconnect(c.o.Quiesce)
}

// TrySubscribe subscribes to filter at QoS 1 and hands every message to h;
// an error says why not, a refusal of the broker (SUBACK 0x80) included.
func (c *Client) TrySubscribe(filter string, h Handler) error {
	tok := c.c.Subscribe(filter, 1, func(_ paho.Client, m paho.Message) { h(m.Topic(), m.Payload()) })
	if !tok.WaitTimeout(c.o.wait()) {
		return fmt.Errorf("no answer within %v", c.o.wait())
	}
	if err := tok.Error(); err != nil {
		return err
	}
	if st, ok := tok.(*paho.SubscribeToken); ok {
		if code, ok := st.Result()[filter]; ok && code >= 0x80 {
			return fmt.Errorf("refused by the broker (SUBACK code %#x)", code)
		}
	}
	return nil
}

// Subscribe is TrySubscribe that fails the test.
func (c *Client) Subscribe(t testing.TB, filter string, h Handler) {
	t.Helper()
	if err := c.TrySubscribe(filter, h); err != nil {
		t.Fatalf("%s: subscribe %s: %v", c.o.name(), filter, err)
	}
}

// TryPublish publishes payload on topic at QoS 1 and waits for its PUBACK.
func (c *Client) TryPublish(topic string, payload []byte, retained bool) error {
	tok := c.c.Publish(topic, 1, retained, payload)
	if !tok.WaitTimeout(c.o.wait()) {
		return fmt.Errorf("no answer within %v", c.o.wait())
	}
	return tok.Error()
}

// Publish is TryPublish that fails the test.
func (c *Client) Publish(t testing.TB, topic string, payload []byte, retained bool) {
	t.Helper()
	if err := c.TryPublish(topic, payload, retained); err != nil {
		t.Fatalf("%s: publish %s: %v", c.o.name(), topic, err)
	}
}

// Retained returns topic's retained payload on the broker that o names,
// "" when there is none (within 300 ms) or the broker cannot be reached.
func Retained(o Options, topic string) string {
	o.Wait = 5 * time.Second
	c, err := Dial(o)
	if err != nil {
		return ""
	}
	defer c.Close()
	got := make(chan string, 1)
	c.c.Subscribe(topic, 1, func(_ paho.Client, m paho.Message) {
		select {
		case got <- string(m.Payload()):
		default:
		}
	})
	select {
	case s := <-got:
		return s
	case <-time.After(300 * time.Millisecond):
		return ""
	}
}
