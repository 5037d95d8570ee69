package emulator

import (
	"time"
)

// Faults makes a device misbehave as field devices do. Each request draws
// Drop, BadCRC and Exception from the Emulator's seeded generator, so a run
// is repeatable. The write faults (RefuseWrites, DropWriteReplies,
// WriteReplyDelay, ClampWrite) are not drawn: they hit every write (fc 5,
// 6, 15, 16) that Drop and Exception spared, so that a test of a master's
// writes knows what each write meets.
type Faults struct {
	// Drop is the share of requests left unanswered (0..1): a master sees a
	// timeout.
	Drop float64
	// BadCRC is the share of replies sent with a corrupted CRC (0..1). It
	// applies to RTU framing only; Modbus TCP has no CRC.
	BadCRC float64
	// Exception is the share of requests answered with exception 4, server
	// device failure (0..1).
	Exception float64
	// Turnaround is the slave's turnaround time Ts, added before each reply
	// on every transport (field devices take 5–60 ms).
	Turnaround time.Duration

	// RefuseWrites answers every write with exception 3, illegal data
	// value, and stores nothing: a device whose setpoints are locked.
	RefuseWrites bool
	// DropWriteReplies executes and stores every write but sends no reply:
	// the master times out not knowing that the write took effect.
	DropWriteReplies bool
	// WriteReplyDelay delays the reply to a write by this much on top of
	// Turnaround; the write itself takes effect at once. Beyond the
	// master's timeout the reply arrives late, when the master has given
	// up (and, on a serial line, may be reading the next reply).
	WriteReplyDelay time.Duration
	// ClampWrite, when set, limits holding-register writes (fc 6 and 16)
	// as a device that silently clamps a setpoint to its range does: the
	// device stores ClampWrite(addr, v) for each register written, and
	// still answers with the normal echo. See [ClampRange].
	ClampWrite func(addr, v uint16) uint16
}

// ClampRange is a [Faults.ClampWrite] that keeps every raw register value
// within lo..hi, read as unsigned.
func ClampRange(lo, hi uint16) func(addr, v uint16) uint16 {
	return func(_, v uint16) uint16 { return min(max(v, lo), hi) }
}
