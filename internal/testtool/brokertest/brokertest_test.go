package brokertest_test

import (
	"bufio"
	"context"
	"io"
	"net"
	"strings"
	"sync"
	"testing"
	"time"

	"fieldlink/internal/testtool"
	"fieldlink/internal/testtool/brokertest"
)

// A subscriber takes what a client publishes, through a proxy that goes
// down and comes back up after its last outage.
func TestSubscriberClientProxy(t *testing.T) {
	b := testtool.NewMosquitto(t, testtool.FindMosquitto(t))
	var mu sync.Mutex
	var got []string
	brokertest.Subscribe(t, brokertest.Options{Brokers: []string{b.Addr()}}, "fieldlink/#", func(topic string, payload []byte) {
		mu.Lock()
		got = append(got, topic+" "+string(payload))
		mu.Unlock()
	})
	x := brokertest.NewProxy(t, "broker", b.Addr())
	lost := make(chan error, 1)
	c := brokertest.NewClient(t, brokertest.Options{Name: "platform", Brokers: []string{x.Addr()}, Lost: func(err error) { lost <- err }})
	c.Publish(t, "fieldlink/a", []byte("one"), false)
	testtool.WaitFor(t, 5*time.Second, "the message", func() bool {
		mu.Lock()
		defer mu.Unlock()
		return len(got) == 1 && got[0] == "fieldlink/a one"
	})

	x.Down()
	x.Down()
	select {
	case <-lost:
	case <-time.After(5 * time.Second):
		t.Fatal("the client did not lose its connection when the proxy went down")
	}
	x.Up()
	if _, err := brokertest.Dial(brokertest.Options{Brokers: []string{x.Addr()}, Wait: 2 * time.Second}); err == nil {
		t.Fatal("connected through a proxy one outage still holds down")
	}
	x.Up()
	c2 := brokertest.NewClient(t, brokertest.Options{Brokers: []string{x.Addr()}})
	c2.Publish(t, "fieldlink/b", []byte("retained"), true)
	if r := brokertest.Retained(brokertest.Options{Brokers: []string{b.Addr()}}, "fieldlink/b"); r != "retained" {
		t.Errorf("retained %q, want %q", r, "retained")
	}

	x.AddToxic(`{"name":"slow","type":"latency","stream":"downstream","attributes":{"latency":300}}`)
	start := time.Now()
	c2.Publish(t, "fieldlink/c", []byte("slow"), false)
	if d := time.Since(start); d < 250*time.Millisecond {
		t.Errorf("a PUBACK through 300 ms of latency came in %v", d)
	}
	x.Reset()
	start = time.Now()
	c2.Publish(t, "fieldlink/c", []byte("fast"), false)
	if d := time.Since(start); d > 250*time.Millisecond {
		t.Errorf("a PUBACK after Reset took %v", d)
	}
}

// A subscription the broker refuses (SUBACK 0x80) is an error, not a
// silence; here the broker is a stand-in that refuses every subscription.
func TestRefusedSubscription(t *testing.T) {
	addr := testtool.ServeLoopback(t, refuser)
	o := brokertest.Options{Brokers: []string{addr}, Username: "platform", Password: "secret"}
	c := brokertest.NewClient(t, o)
	err := c.TrySubscribe("fieldlink/#", func(string, []byte) {})
	if err == nil || !strings.Contains(err.Error(), "refused") {
		t.Errorf("a refused subscription: %v, want a refusal", err)
	}
}

// refuser is an MQTT 3.1.1 broker that accepts every connection and
// refuses every subscription.
func refuser(ctx context.Context, ln net.Listener) error {
	go func() { <-ctx.Done(); ln.Close() }()
	for {
		conn, err := ln.Accept()
		if err != nil {
			return nil
		}
		go func() {
			defer conn.Close()
			r := bufio.NewReader(conn)
			for {
				kind, err := r.ReadByte()
				if err != nil {
					return
				}
				n, shift := 0, 0
				for {
					b, err := r.ReadByte()
					if err != nil {
						return
					}
					n |= int(b&0x7f) << shift
					shift += 7
					if b&0x80 == 0 {
						break
					}
				}
				body := make([]byte, n)
				if _, err := io.ReadFull(r, body); err != nil {
					return
				}
				switch kind >> 4 {
				case 1: // CONNECT
					_, err = conn.Write([]byte{0x20, 2, 0, 0})
				case 8: // SUBSCRIBE
					_, err = conn.Write([]byte{0x90, 3, body[0], body[1], 0x80})
				case 12: // PINGREQ
					_, err = conn.Write([]byte{0xd0, 0})
				case 14: // DISCONNECT
					return
				}
				if err != nil {
					return
				}
			}
		}()
	}
}
