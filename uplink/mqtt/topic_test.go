package mqtt

import (
	"context"
	"errors"
	"testing"

	"fieldlink/uplink"
)

// A packet whose topic cannot be made is refused for good.
func TestMQTTBadTopicIsPermanent(t *testing.T) {
	vars := map[string]string{"site": "farm-7", "gateway": "gw1", "slash": "a/b", "data_type": "ignored"}
	m, err := newMQTT(mqttConfig{URL: "mqtt://h", Vars: vars})
	if err != nil {
		t.Fatal(err)
	}
	err = m.publish(context.Background(), map[string]string{"data_type": "a/b"}, nil)
	var perm interface{ Permanent() bool }
	if !errors.As(err, &perm) || !perm.Permanent() {
		t.Errorf("Publish with a bad topic = %v, want a permanent error", err)
	}
	if m.window() != uplink.DefaultWindow {
		t.Errorf("window() = %d", m.window())
	}
}
