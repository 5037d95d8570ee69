// Package errnote keeps an upstream's latest error, in words, with its
// time, for the status page; the core and the kinds share it.
package errnote

import (
	"sync/atomic"
	"time"
)

// Last keeps the latest error noted; safe for concurrent use. The zero
// value is ready.
type Last struct{ p atomic.Pointer[note] }

type note struct {
	text string
	at   time.Time
}

// Note records an error's words (see uplink.Explain) at now; "" is
// ignored.
func (l *Last) Note(text string) {
	if text != "" {
		l.p.Store(&note{text: text, at: time.Now()})
	}
}

// Get returns the latest error in words and its time; "" if none.
func (l *Last) Get() (string, time.Time) {
	if n := l.p.Load(); n != nil {
		return n.text, n.at
	}
	return "", time.Time{}
}
