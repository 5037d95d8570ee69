package downlink

import "crypto/ed25519"

// admission is what Admit checks a command against: a copy of the
// engine's keys and names.
type admission struct {
	keys          []ed25519.PublicKey
	site, gateway string
}

// Admit reports whether payload is a command signed by one of the keys
// and for this gateway: the engine's own signature check, cheap enough
// (one Ed25519 verification, no bus, no ledger) for the MQTT client's own
// goroutine, so that such a command can be queued apart from a flood of
// others. It decides nothing: Handle checks the command again, and every
// rule besides. With no keys it admits nothing. Safe for concurrent use,
// and never waits for a command running.
func (e *Engine) Admit(payload []byte) bool {
	a := e.admission.Load()
	if a == nil || len(a.keys) == 0 {
		return false
	}
	cmd, err := ParseCommand(payload)
	if err != nil || cmd.Verify(a.keys) != nil {
		return false
	}
	return cmd.Site == a.site && cmd.Gateway == a.gateway
}

// Refuse answers and audits a command that its transport could not make
// whole (a Sparkplug DCMD's metric with an alias of no point, a value that
// is no number, a DCMD of too many metrics): a rejection with reason,
// like a command that does not parse. cmd holds what is known of it; its
// ID should be set, so that the sender can match the result. Like a
// forgery it leaves no packet in the buffer.
func (e *Engine) Refuse(cmd Command, reason string) Result {
	res := Result{ID: cmd.ID, Status: StatusRejected, Reason: reason, Value: cmd.Value, At: e.opt.Now()}
	e.refused(&cmd, res, false)
	return res
}
