package downlink

import (
	"context"
	"crypto/ed25519"
	"fmt"
	"strings"
	"testing"
	"time"

	"fieldlink/packet"
	"fieldlink/sensors"
)

// A signed command names the site and the gateway it is for, under its
// signature: copied byte for byte onto another gateway's command topic it
// is refused there, with a result that says so and an audit entry, and
// nothing is written; one naming no gateway or no site is refused too.
func TestSignedCommandBoundToItsGateway(t *testing.T) {
	pub, priv, _ := ed25519.GenerateKey(nil)
	r := newRig(t, pub) // site 001, gateway gw-01
	r.site.out = sensors.WriteResult{Readback: packet.Bool(true)}
	signed := func(id, target string) []byte {
		payload := fmt.Sprintf(`{"id":%q%s,"device":"valve-1","point":"ValveOpen","value":true,"issued_at":%q,"actor":"ops:alice"}`, id, target, e0.Format(time.RFC3339))
		c, err := ParseCommand([]byte(payload))
		if err != nil {
			t.Fatalf("%s: %v", id, err)
		}
		return Sign(c, priv).JSON()
	}
	for i, tc := range []struct{ name, target, reason string }{
		{"no gateway, no site", ``, "names no gateway"},
		{"another gateway", `,"site":"002","gateway":"gw-02"`, "signed for gateway gw-02 at site 002; this is gateway gw-01 at site 001"},
		{"the same gateway id at another site", `,"site":"002","gateway":"gw-01"`, "signed for gateway gw-01 at site 002"},
		{"no site", `,"gateway":"gw-01"`, "names no site"},
	} {
		id := fmt.Sprintf("b%d", i)
		res := r.e.Handle(context.Background(), signed(id, tc.target))
		if res.Status != StatusRejected || !strings.Contains(res.Reason, tc.reason) {
			t.Fatalf("%s: %s %q, want rejected saying %q", tc.name, res.Status, res.Reason, tc.reason)
		}
		if n := len(r.ledger.refused); n != i+1 || r.ledger.refused[n-1] != res {
			t.Fatalf("%s: %d refusals audited, the last %+v; want this one", tc.name, n, r.ledger.refused)
		}
	}
	if len(r.site.writes) != 0 || len(r.ledger.seen) != 0 || len(r.packets) != 0 {
		t.Fatalf("misdirected commands wrote %v, kept %d ids, buffered %d packets", r.site.writes, len(r.ledger.seen), len(r.packets))
	}
	if res := r.e.Handle(context.Background(), signed("ok", `,"site":"001","gateway":"gw-01"`)); res.Status != StatusDone {
		t.Fatalf("a command signed for this gateway: %+v", res)
	}
	// Without keys a command that names another gateway is refused too:
	// it was meant for another site's devices.
	u := newRig(t)
	payload := fmt.Sprintf(`{"id":"u1","site":"001","gateway":"gw-02","device":"valve-1","point":"ValveOpen","value":true,"issued_at":%q}`, e0.Format(time.RFC3339))
	if res := u.e.Handle(context.Background(), []byte(payload)); res.Status != StatusRejected || !strings.Contains(res.Reason, "gw-02") || len(u.ledger.refused) != 1 {
		t.Fatalf("unsigned, for another gateway: %+v (%d refusals audited)", res, len(u.ledger.refused))
	}
}
