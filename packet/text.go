package packet

import "fmt"

// String returns the site file's spelling: "strings" or "number".
func (s ValueStyle) String() string {
	if s == Numbers {
		return "number"
	}
	return "strings"
}

// MarshalText returns the site file's spelling.
func (s ValueStyle) MarshalText() ([]byte, error) { return []byte(s.String()), nil }

// UnmarshalText reads "strings" or "number".
func (s *ValueStyle) UnmarshalText(b []byte) error {
	switch string(b) {
	case "strings":
		*s = Strings
	case "number":
		*s = Numbers
	default:
		return fmt.Errorf("must be strings or number, got %q", b)
	}
	return nil
}
