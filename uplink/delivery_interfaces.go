package uplink

import (
	"context"
	"time"

	"fieldlink/buffer"
)

// Buffer is the durable buffer as the delivery loop uses it.
type Buffer interface {
	// Lease returns up to max records, alarms first, and leases them: they
	// are not handed out again until released.
	Lease(max int) ([]buffer.Record, error)
	// Ack deletes delivered records.
	Ack(seqs ...uint64) error
	// Release returns undelivered records to the buffer.
	Release(seqs ...uint64)
	// Wait blocks until an unleased record exists.
	Wait(ctx context.Context) error
}

// DeadLetters takes records that an upstream refused for good (see
// [fieldlink/uplink/http.Sender.Send] for which answers those are), so that one poison packet
// cannot block the buffer.
type DeadLetters interface {
	DeadLetter(reason string, seqs ...uint64) error
}

// Sender delivers batches to one upstream.
type Sender interface {
	// Name identifies the upstream in logs and metrics (no credentials).
	Name() string
	// Send returns nil only once the upstream acknowledged every record
	// of the batch (an MQTT PUBACK for each, an HTTP 2xx for the batch).
	// An error with a method Permanent() bool that returns true says that
	// the upstream refuses the packets themselves: the loop resends the
	// batch one record at a time and dead-letters each record refused
	// alone. An error with a method RetryAfter() time.Duration asks that
	// the upstream get no send before that wait (at most 5 minutes).
	// Any other error is the upstream's failure: the records are tried
	// elsewhere or go back to the buffer.
	Send(ctx context.Context, batch []buffer.Record) error
	// MaxBatch is how many records one Send may carry.
	MaxBatch() int
	// Window is how many Sends may be in flight at once.
	Window() int
	// Up reports whether the upstream can be tried now (connected, or its
	// latest probe answered).
	Up() bool
}

// permanent marks an error that says the upstream refuses the packets
// themselves, so that resending them cannot help.
type permanent interface{ Permanent() bool }

// retryAfter marks an error by which the upstream asks not to be sent to
// before a wait has passed.
type retryAfter interface{ RetryAfter() time.Duration }

// maxRetryAfter caps the wait an upstream may ask for: a longer one is more
// likely a server's mistake than a plan, and the other upstreams, or this one
// after 5 minutes, can take the records meanwhile.
const maxRetryAfter = 5 * time.Minute

// lastErrorer is a [Sender] that keeps its latest connection error in
// words.
type lastErrorer interface {
	LastError() (string, time.Time)
}

// laterAcker is a Buffer whose deletions can ride on its next write instead
// of costing one of their own ([buffer.Buffer.AckLater]): a crash before
// that write only sends the packets again, which at-least-once allows.
type laterAcker interface {
	AckLater(seqs ...uint64) error
}
