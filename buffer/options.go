package buffer

import (
	"log/slog"
	"strconv"
	"time"

	"fieldlink/internal/kclock"
	"fieldlink/packet"
)

// Durability decides when Append returns. The zero value is [Always].
type Durability uint8

const (
	// Always returns from Append after the commit that holds the packet,
	// and both of its fsyncs, completed. Appends that arrive while a commit
	// is running share the next one (group commit).
	Always Durability = iota

	// Interval returns from Append as soon as the writer has put the packet
	// into its open transaction, which it commits at least every
	// Options.SyncEvery. A power cut loses at most that window of appends.
	// Fsync is never switched off: Interval commits less often, that is all.
	Interval
)

// String returns the config spelling: "always" or "interval".
func (d Durability) String() string { return spelling("Durability", d, "always", "interval") }

// Order is the replay order of normal (non-alarm) records. Alarms are always
// delivered first, oldest first. The zero value is [OldestFirst].
type Order uint8

const (
	// OldestFirst delivers normal records in the order they were appended.
	OldestFirst Order = iota

	// NewestFirst delivers the newest normal records first: after a long
	// outage, live data goes out first and the backlog drains behind it.
	NewestFirst
)

// String returns the config spelling: "oldest_first" or "newest_first".
func (o Order) String() string { return spelling("Order", o, "oldest_first", "newest_first") }

// WhenFull decides what an Append does when the live records would exceed
// Options.MaxBytes. The zero value is [DropOldest].
type WhenFull uint8

const (
	// DropOldest evicts the oldest normal records to make room; alarms are
	// evicted only when no normal record is left, and only to make room for
	// another alarm (a normal packet is then rejected with ErrFull).
	DropOldest WhenFull = iota

	// RejectNew rejects a new normal packet with ErrFull. A new alarm still
	// evicts the oldest normal records: alarms are evicted last.
	RejectNew
)

// String returns the config spelling: "drop_oldest" or "reject_new".
func (w WhenFull) String() string { return spelling("WhenFull", w, "drop_oldest", "reject_new") }

// spelling returns the config spelling of policy v, names[v] (the
// policies' constants count from 0 by iota), or typ(v) for a value
// without one.
func spelling[T ~uint8](typ string, v T, names ...string) string {
	if int(v) < len(names) {
		return names[v]
	}
	return typ + "(" + strconv.Itoa(int(v)) + ")"
}

// Defaults for the zero fields of [Options].
const (
	DefaultSyncEvery      = time.Second
	DefaultMaxBytes       = 256 << 20
	DefaultCompactMinSize = 4 << 20
	DefaultCompactRatio   = 4
)

// Internal limits. They are constants, not options, because no site has a
// reason to change them.
const (
	// maxBatch is the most records (appends, acks, evictions do not count)
	// that one transaction takes before it commits. 1000 records per commit
	// is where bbolt's throughput flattens out; it also bounds the dirty
	// pages an Interval transaction holds in memory.
	maxBatch = 1000

	// queueLen is the capacity of the writer's request queue. Appends block
	// (or give up when their context ends) while it is full.
	queueLen = 4096

	// lockTimeout is how long Open waits for another process's lock.
	lockTimeout = time.Second

	// deleteChunk is the most records one age-eviction or purge
	// transaction deletes, so that a huge backlog does not build one huge
	// transaction in memory.
	deleteChunk = 20000

	// maxDead and maxDeadBytes bound the dead letters (counted as 16 bytes
	// of key, the reason and the record), which MaxBytes does not count:
	// beyond either, the oldest are dropped, so that an upstream that
	// refuses everything cannot fill the card.
	maxDead      = 10000
	maxDeadBytes = 16 << 20

	// pageSize is bbolt's page size for new files (and compacted ones).
	// Every commit rewrites whole pages: the leaf that takes the cycle's
	// packets, the leaf that loses the acked ones, the branch and bucket
	// pages above them, the state's page, the freelist and the meta page.
	// At 4 KiB (bbolt's default, the OS page) a cycle of 10 small packets
	// wrote 7.7 times their bytes; at 1 KiB it writes 3.9 times (see
	// docs/footprint.md). A file keeps the page size it was created with
	// (bbolt reads it from the meta page).
	pageSize = 1024

	// reserveBytes is the room a commit that frees space (acks, evictions,
	// dead-letter drops: no new record) may use beyond the bound that
	// appends stop at, so that on a full file the acks still commit: bbolt
	// writes the new leaf, branch and freelist pages before it frees the
	// old ones. See writer.bound.
	reserveBytes = 64 << 10

	// laterDelay is the longest AckLater's deletions wait for a commit to
	// ride on before they get one of their own: longer than the poll
	// intervals sites use, so that on a steady flow they always ride.
	laterDelay = 10 * time.Second
)

// Options configure a [Buffer]. The zero value gives the defaults, which
// every field documents.
type Options struct {
	// Durability is Always (the default) or Interval.
	Durability Durability

	// SyncEvery is, with Interval durability, the longest time an append may
	// sit in the writer's open transaction before it is committed. Zero means
	// DefaultSyncEvery (one second). Ignored with Always.
	SyncEvery time.Duration

	// MaxBytes bounds the live records, counted as 8 bytes of key, 16 bytes
	// of header and the JSON. The file is larger by bbolt's page overhead.
	// Zero means DefaultMaxBytes (256 MiB).
	MaxBytes int64

	// MaxAge evicts records whose reading time is older than this, alarms
	// included, counted in Stats.EvictedMaxAge. The writer looks every
	// MaxAge/10 (at least every minute, at most every second). Zero means no
	// age limit.
	MaxAge time.Duration

	// WhenFull is DropOldest (the default) or RejectNew.
	WhenFull WhenFull

	// Order is the replay order of normal records: OldestFirst (the default)
	// or NewestFirst. Alarms always go first, oldest first.
	Order Order

	// Values is how Append renders the DataBody: packet.Strings (the
	// default) or packet.Numbers.
	Values packet.ValueStyle

	// CompactMinSize and CompactRatio decide when the file is compacted:
	// when it is larger than CompactMinSize and than CompactRatio times the
	// live bytes: records, dead letters and aux values (bbolt files never
	// shrink by themselves). Zero means
	// DefaultCompactMinSize (4 MiB) and DefaultCompactRatio (4). A negative
	// CompactRatio turns compaction off.
	CompactMinSize int64
	CompactRatio   int

	// Logger receives losses (loudly, at Error), recoveries and compactions.
	// Nil means slog.Default().
	Logger *slog.Logger

	// Now returns the current time, for MaxAge and for packets without a
	// reading time. Nil means time.Now.
	Now func() time.Time

	// Synced reports whether the wall clock is synchronised. While it is
	// not, MaxAge evicts nothing (a clock stepped forward would age every
	// record at once); once it is, the records stamped before are
	// re-stamped (see Restamp). Nil means the kernel's NTP state, or, when
	// Now is set, true: a caller's own clock is taken as true.
	Synced func() bool

	// Mono is the monotonic clock (CLOCK_MONOTONIC), for re-stamping.
	// Nil means the kernel's.
	Mono func() time.Duration

	// BootID names this boot, for re-stamping: only records of this boot
	// can be. Empty means the kernel's boot id.
	BootID string

	// UnsafeNoSync turns bbolt's fsync off (bbolt's NoSync): commits then
	// reach only the page cache, and a power cut loses them. For the power
	// cut tests' control run alone, which must see losses; never in the field.
	UnsafeNoSync bool

	// Test hooks.
	maxFileSize    int                    // bbolt's MaxSize: disk-full tests where mounts are refused
	pageSize       int                    // bbolt's page size for new files, when not zero (old files' tests)
	failCommit     func() error           // a non-nil result abandons the commit with that error
	noFreelistSync bool                   // measure bbolt's NoFreelistSync
	deadMax        int64                  // maxDead, when not zero
	deadMaxBytes   int64                  // maxDeadBytes, when not zero
	waiting        func()                 // Wait found nothing and is about to block
	compactCheck   func(size, live int64) // maybeCompact weighs a file of size bytes against live ones
	laterDelay     time.Duration          // laterDelay, when not zero
}

// withDefaults returns o with its zero fields set to the defaults.
func (o Options) withDefaults() Options {
	if o.SyncEvery <= 0 {
		o.SyncEvery = DefaultSyncEvery
	}
	if o.MaxBytes <= 0 {
		o.MaxBytes = DefaultMaxBytes
	}
	if o.MaxAge < 0 {
		o.MaxAge = 0
	}
	if o.CompactMinSize <= 0 {
		o.CompactMinSize = DefaultCompactMinSize
	}
	if o.CompactRatio == 0 {
		o.CompactRatio = DefaultCompactRatio
	}
	if o.Logger == nil {
		o.Logger = slog.Default()
	}
	if o.Synced == nil {
		o.Synced = kclock.Synced
		if o.Now != nil {
			o.Synced = func() bool { return true }
		}
	}
	if o.Now == nil {
		o.Now = time.Now
	}
	if o.Mono == nil {
		o.Mono = kclock.Mono
	}
	if o.deadMax <= 0 {
		o.deadMax = maxDead
	}
	if o.deadMaxBytes <= 0 {
		o.deadMaxBytes = maxDeadBytes
	}
	if o.laterDelay <= 0 {
		o.laterDelay = laterDelay
	}
	return o
}
