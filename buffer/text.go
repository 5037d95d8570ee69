package buffer

import "fmt"

// The policies read and write their config spelling (see each String), so
// that a site file names them and a config error says what is valid.

// MarshalText returns the config spelling.
func (d Durability) MarshalText() ([]byte, error) { return []byte(d.String()), nil }

// UnmarshalText reads "always" or "interval".
func (d *Durability) UnmarshalText(b []byte) error {
	return parseText(b, d, "always or interval", Always, Interval)
}

// MarshalText returns the config spelling.
func (o Order) MarshalText() ([]byte, error) { return []byte(o.String()), nil }

// UnmarshalText reads "oldest_first" or "newest_first".
func (o *Order) UnmarshalText(b []byte) error {
	return parseText(b, o, "oldest_first or newest_first", OldestFirst, NewestFirst)
}

// MarshalText returns the config spelling.
func (w WhenFull) MarshalText() ([]byte, error) { return []byte(w.String()), nil }

// UnmarshalText reads "drop_oldest" or "reject_new".
func (w *WhenFull) UnmarshalText(b []byte) error {
	return parseText(b, w, "drop_oldest or reject_new", DropOldest, RejectNew)
}

// parseText sets *v to the one of valid whose String is b.
func parseText[T fmt.Stringer](b []byte, v *T, want string, valid ...T) error {
	for _, x := range valid {
		if x.String() == string(b) {
			*v = x
			return nil
		}
	}
	return fmt.Errorf("must be %s, got %q", want, b)
}
