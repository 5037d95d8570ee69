package downlink

import (
	"crypto/ed25519"
	"sync"
)

// admittedIDs bounds the ids Admit remembers: far more signed commands
// than a site sends within max_age.
const admittedIDs = 1024

// admission is what Admit checks a command against: a copy of the
// engine's keys and names, and the ids it admitted, oldest first.
type admission struct {
	keys          []ed25519.PublicKey
	site, gateway string

	mu    sync.Mutex
	seen  map[string]bool
	order []string
}

// once reports whether id is admitted for the first time, and remembers
// it (forgetting the oldest beyond admittedIDs).
func (a *admission) once(id string) bool {
	a.mu.Lock()
	defer a.mu.Unlock()
	if a.seen[id] {
		return false
	}
	if a.seen == nil {
		a.seen = make(map[string]bool)
	}
	if len(a.order) == admittedIDs {
		delete(a.seen, a.order[0])
		a.order = a.order[1:]
	}
	a.seen[id] = true
	a.order = append(a.order, id)
	return true
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
	// A replay of an admitted command goes with the crowd: the ledger
	// answers it from the first result, and it must not fill the room
	// kept for signed commands.
	return cmd.Site == a.site && cmd.Gateway == a.gateway && a.once(cmd.ID)
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
