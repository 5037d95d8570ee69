package downlink

import (
	"context"
	"crypto/ed25519"
	"strings"
	"sync"
	"testing"
	"time"

	"fieldlink/packet"
	"fieldlink/sensors"
)

// Admit lets through only what Handle's signature check would: a command
// signed by a key of the site, for this gateway; and it answers while a
// command holds the bus.
func TestEngineAdmit(t *testing.T) {
	pub, priv, _ := ed25519.GenerateKey(nil)
	_, other, _ := ed25519.GenerateKey(nil)
	r := newRig(t, pub)
	cmd, err := ParseCommand([]byte(strings.Replace(cmdJSON("a1", "ValveOpen", "true", e0), `"device"`, `"site":"001","gateway":"gw-01","device"`, 1)))
	if err != nil {
		t.Fatal(err)
	}
	elsewhere := cmd
	elsewhere.Gateway = "gw-02"
	for name, tc := range map[string]struct {
		payload []byte
		want    bool
	}{
		"signed":              {Sign(cmd, priv).JSON(), true},
		"unsigned":            {cmd.JSON(), false},
		"wrong key":           {Sign(cmd, other).JSON(), false},
		"altered":             {[]byte(strings.Replace(string(Sign(cmd, priv).JSON()), `"value":true`, `"value":false`, 1)), false},
		"for another gateway": {Sign(elsewhere, priv).JSON(), false},
		"not JSON":            {[]byte("{"), false},
	} {
		if got := r.e.Admit(tc.payload); got != tc.want {
			t.Errorf("%s: Admit = %v, want %v", name, got, tc.want)
		}
	}
	if newRig(t).e.Admit(Sign(cmd, priv).JSON()) {
		t.Error("an engine without keys admitted a command")
	}

	// A write that hangs holds the bus; Admit still answers.
	bp := &blockingPoints{entered: make(chan struct{}), release: make(chan struct{})}
	e := NewEngine(engineConfig(t), Options{Points: bp, Ledger: &memLedger{seen: map[string]*Result{}}, Keys: []ed25519.PublicKey{pub},
		Now: func() time.Time { return e0 }})
	var wg sync.WaitGroup
	wg.Go(func() { e.Handle(context.Background(), Sign(cmd, priv).JSON()) })
	<-bp.entered
	if !e.Admit(Sign(cmd, priv).JSON()) {
		t.Error("Admit refused a signed command while another ran")
	}
	close(bp.release)
	wg.Wait()
}

// blockingPoints' Write waits for release.
type blockingPoints struct{ entered, release chan struct{} }

func (b *blockingPoints) Write(ctx context.Context, _, _ string, _ float64) (sensors.WriteResult, error) {
	close(b.entered)
	<-b.release
	return sensors.WriteResult{Readback: packet.Bool(true)}, nil
}

func (b *blockingPoints) Latest(string, string, time.Time) (sensors.Reading, bool) {
	return sensors.Reading{}, false
}

// Refuse answers and audits a command its transport could not make, and
// buffers nothing.
func TestEngineRefuse(t *testing.T) {
	r := newRig(t)
	res := r.e.Refuse(Command{ID: "spb-1", Device: "valve-1", Point: "ValveOpen", Actor: "sparkplug:DCMD seq 3"}, "value NaN is not a number")
	if res.Status != StatusRejected || res.ID != "spb-1" || res.Reason != "value NaN is not a number" {
		t.Errorf("result %+v", res)
	}
	if len(r.published) != 1 || r.published[0] != res {
		t.Errorf("published %+v, want the result", r.published)
	}
	if len(r.ledger.refused) != 1 || r.ledger.refusedCmds[0] == nil || r.ledger.refusedCmds[0].Point != "ValveOpen" {
		t.Errorf("audited %+v", r.ledger.refusedCmds)
	}
	if len(r.packets) != 0 || len(r.site.writes) != 0 {
		t.Errorf("%d packets and writes %v, want none", len(r.packets), r.site.writes)
	}
}

// A signed command admitted once is not admitted again: anyone who saw it
// may replay it by the thousand, and its replays must not fill the room
// kept for signed commands (the ledger answers each from the first
// result; a replay left in the crowd loses nothing).
func TestEngineAdmitOncePerID(t *testing.T) {
	pub, priv, _ := ed25519.GenerateKey(nil)
	r := newRig(t, pub)
	mk := func(id string) []byte {
		cmd, err := ParseCommand([]byte(strings.Replace(cmdJSON(id, "ValveOpen", "true", e0), `"device"`, `"site":"001","gateway":"gw-01","device"`, 1)))
		if err != nil {
			t.Fatal(err)
		}
		return Sign(cmd, priv).JSON()
	}
	if !r.e.Admit(mk("a1")) {
		t.Fatal("a signed command not admitted")
	}
	for i := range 3 {
		if r.e.Admit(mk("a1")) {
			t.Fatalf("replay %d of a1 admitted again", i+1)
		}
	}
	if !r.e.Admit(mk("a2")) {
		t.Fatal("another signed command not admitted after a1's replays")
	}
}
