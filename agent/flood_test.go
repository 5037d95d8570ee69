package agent

import (
	"fmt"
	"path/filepath"
	"slices"
	"testing"
	"time"

	paho "github.com/eclipse/paho.mqtt.golang"

	"fieldlink/downlink"
	"fieldlink/internal/testtool"
)

// A burst of 1,000 commands with no signature, any broker user's, with
// one signed command at its middle: the signed command is admitted apart
// from the flood and done, written once.
func TestSignedCommandThroughAFlood(t *testing.T) {
	dir := t.TempDir()
	priv := testtool.SigningKeyFiles(t, filepath.Join(dir, "ops"))
	b := testtool.NewMosquitto(t, testtool.FindMosquitto(t))
	p := newPlatform(t, b.Addr())
	r := startDownlinkSite(t, fmt.Sprintf(", keys: [%q]", filepath.Join(dir, "ops.pub")), b)

	cmd, err := downlink.ParseCommand([]byte(command("signed-500", "valve-1", "ValveOpen", "true", time.Now(), `,"site":"001","gateway":"gw-dl"`)))
	if err != nil {
		t.Fatal(err)
	}
	const burst, at = 1000, 500
	toks := make([]paho.Token, 0, burst)
	for i := range burst {
		payload := []byte(command(fmt.Sprintf("forged-%d", i), "valve-1", "ValveOpen", "false", time.Now(), `,"site":"001","gateway":"gw-dl"`))
		if i == at {
			payload = downlink.Sign(cmd, priv).JSON()
		}
		toks = append(toks, p.c.Paho().Publish("fieldlink/001/gw-dl/cmd", 1, false, payload))
	}
	for _, tok := range toks {
		if !tok.WaitTimeout(30*time.Second) || tok.Error() != nil {
			t.Fatalf("publish: %v", tok.Error())
		}
	}
	testtool.WaitFor(t, 30*time.Second, "the signed command done", func() bool {
		p.mu.Lock()
		defer p.mu.Unlock()
		return slices.ContainsFunc(p.results, func(r downlink.Result) bool { return r.ID == "signed-500" && r.Status == downlink.StatusDone })
	})
	if got := r.frames.of(slaveValve); len(got) != 1 {
		t.Errorf("the device received %v, want the signed command once", got)
	}
}
