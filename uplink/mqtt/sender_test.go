package mqtt

import (
	"testing"
)

func TestTopicVars(t *testing.T) {
	v := (&mqttSender{}).topicVars([]byte(`{"DataHead":{"Date":"2026-01-01","DataType":"Gas","DeviceId":"ch4-1","Seq":1}}`))
	if v["data_type"] != "Gas" || v["device"] != "ch4-1" {
		t.Fatalf("%v", v)
	}
}

// TestDeliveryRestsAFailingUpstream: an upstream that is up but refuses
// every delivery (a 401, a refused TLS handshake) is tried again after a
// growing rest, not as fast as it can refuse; when it accepts again, the
// backlog drains.
