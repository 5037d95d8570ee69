package buffer

import "errors"

// These errors are returned by the methods of a [Buffer]. Test for them with
// [errors.Is]: they are usually wrapped with the path or the cause.
var (
	// ErrClosed is returned by every method called after Close.
	ErrClosed = errors.New("buffer: closed")

	// ErrFull is returned by Append when the policy does not let the packet
	// in: WhenFull is RejectNew and the buffer holds MaxBytes; or the packet
	// is a normal one and only alarms are left to evict; or the packet alone
	// is larger than MaxBytes. The packet is not stored, and it is counted in
	// Stats.RejectedFull.
	ErrFull = errors.New("buffer: full")

	// ErrDiskFull wraps ENOSPC (or bbolt's ErrMaxSizeReached): the
	// transaction that held the packets could not be written, so they are NOT
	// durable and the caller is told. Records committed before are not
	// touched. The buffer stays usable: later transactions try again, and
	// appends succeed by themselves once space returns. Acks that failed this
	// way, and Interval appends that were already answered, are kept and
	// retried by the buffer.
	ErrDiskFull = errors.New("buffer: disk full")

	// ErrFatal means the buffer can no longer write safely: fsync or a write
	// returned EIO, or bbolt panicked on a file that went bad while open. An
	// fsync is never retried (the kernel may have dropped the dirty pages and
	// would report the retry as a success). Every later write fails with
	// ErrFatal; the caller must close the buffer and Open it again (what the
	// gateway's buffer/cardstore does), or exit and let its supervisor
	// restart it. The next Open checks the whole file and salvages it if
	// needed.
	ErrFatal = errors.New("buffer: fatal I/O error, exit and restart")

	// ErrLocked is returned by Open when another process holds the file's
	// lock for longer than the lock timeout (one second). It is not
	// corruption: the file is left alone.
	ErrLocked = errors.New("buffer: in use by another gateway process?")
)
