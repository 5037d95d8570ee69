package downlink

import (
	"encoding/json"
	"time"
)

// Status is what became of a command.
type Status string

// The statuses of a result. Pending is the one answer that is not final:
// a duplicate of a command still running gets it, and the final result
// follows.
const (
	StatusDone           Status = "done"            // written (and read back, where the engine does)
	StatusRejected       Status = "rejected"        // refused before any write: bad signature, unknown point...
	StatusExpired        Status = "expired"         // arrived or came up after its expires_at: not written
	StatusFailed         Status = "failed"          // the write failed: the device did not take it
	StatusUnknownOutcome Status = "unknown_outcome" // the write may or may not have happened
	StatusPending        Status = "pending"         // still running
)

// Final reports whether s is the last word on a command.
func (s Status) Final() bool {
	switch s {
	case StatusDone, StatusRejected, StatusExpired, StatusFailed, StatusUnknownOutcome:
		return true
	}
	return false
}

// Result is the answer to a command, as the gateway publishes it.
type Result struct {
	ID       string    `json:"id"`
	Status   Status    `json:"status"`
	Reason   string    `json:"reason,omitempty"`  // why, for anything but done
	Value    Value     `json:"value,omitzero"`    // the value commanded
	Readback Value     `json:"readback,omitzero"` // the value read back after the write
	At       time.Time `json:"at"`                // when the result was reached
}

// JSON returns r as one line of JSON, its time in UTC.
func (r Result) JSON() []byte {
	r.At = r.At.UTC()
	b, err := json.Marshal(r)
	if err != nil {
		// Only a time outside years 0 to 9999 fails: not one a clock gives.
		r.At = time.Time{}
		b, _ = json.Marshal(r)
	}
	return b
}
