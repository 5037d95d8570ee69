package uplink

import (
	"strings"
	"testing"
	"time"

	"fieldlink/internal/testtool"
)

// Two gateways installed from one image with the same gateway.id connect
// with the same client id: the broker drops each connection as the other
// connects, over and over. Each says so in words, in its log and in its
// last error, rather than "connection lost: EOF".
func TestMQTTClientIDInUseElsewhere(t *testing.T) {
	b := mqttStartBroker(t, mqttBrokerOpts{})
	const id = "fieldlink-gw1-1"
	logA, bufA := mqttLogger(t)
	logB, _ := mqttLogger(t)
	a, _ := mqttRun(t, MQTTConfig{URL: b.URL(), ClientID: id, Logger: logA})
	mqttRun(t, MQTTConfig{URL: b.URL(), ClientID: id, Logger: logB})
	const words = "another client uses this gateway's MQTT client id"
	testtool.WaitFor(t, 30*time.Second, "the log to say another client uses the id", func() bool {
		return strings.Contains(bufA.String(), words)
	})
	if text, at := a.LastError(); !strings.HasPrefix(text, words) || !strings.Contains(text, id) || at.IsZero() {
		t.Errorf("last error %q at %v: want it to say %q and name the id", text, at, words)
	}

	// One client alone, its broker killed and started again: a lost
	// connection, not another client.
	b2 := mqttStartBroker(t, mqttBrokerOpts{})
	c, _ := mqttRun(t, MQTTConfig{URL: b2.URL(), ClientID: "fieldlink-gw2-1"})
	mqttWaitConnected(t, c, true)
	b2.Kill()
	mqttWaitConnected(t, c, false)
	b2.Start()
	mqttWaitConnected(t, c, true)
	if text, _ := c.LastError(); text == "" || strings.Contains(text, words) {
		t.Errorf("a broker restarted: last error %q", text)
	}
}
