package downlink

import (
	"fmt"
	"time"
)

// Timestamp is an RFC 3339 time kept as the text it was given, so that a
// signature over it does not depend on how the platform formats times. The
// zero Timestamp is no time.
type Timestamp struct{ text string }

// NewTimestamp returns t as a Timestamp, in UTC to the nanosecond.
func NewTimestamp(t time.Time) Timestamp { return Timestamp{t.UTC().Format(time.RFC3339Nano)} }

// parseTimestamp reads an RFC 3339 time.
func parseTimestamp(s string) (Timestamp, error) {
	if len(s) > maxTimeLength {
		return Timestamp{}, fmt.Errorf("%d characters: not an RFC 3339 time", len(s))
	}
	if _, err := time.Parse(time.RFC3339Nano, s); err != nil {
		return Timestamp{}, fmt.Errorf("%q: not an RFC 3339 time", s)
	}
	return Timestamp{s}, nil
}

// Time returns the time, the zero time for no time.
func (t Timestamp) Time() time.Time {
	if t.text == "" {
		return time.Time{}
	}
	tt, _ := time.Parse(time.RFC3339Nano, t.text) // checked when made
	return tt
}

// IsZero reports whether t is no time.
func (t Timestamp) IsZero() bool { return t.text == "" }

// String returns the text, "" for no time.
func (t Timestamp) String() string { return t.text }
