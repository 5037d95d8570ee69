package packet

import "fmt"

// String returns the config spelling: "strings" or "number".
func (e Encoding) String() string {
	if e == Numbers {
		return "number"
	}
	return "strings"
}

// MarshalText returns the config spelling.
func (e Encoding) MarshalText() ([]byte, error) { return []byte(e.String()), nil }

// UnmarshalText reads "strings" or "number".
func (e *Encoding) UnmarshalText(b []byte) error {
	switch string(b) {
	case "strings":
		*e = Strings
	case "number":
		*e = Numbers
	default:
		return fmt.Errorf("must be strings or number, got %q", b)
	}
	return nil
}
