// Package serialline is a serial line's settings (baud, parity, data and
// stop bits) and the one place of their rules: a bus's rtu:// URL
// (sensors/modbus), a serial sensor's serial:// URL (config), a firmware
// profile's factory settings (sensors/profile) and gateway emulate's flags
// (sensors/emulator) are checked here. A rule's error says what is valid,
// not which key or flag was given: each caller names that in its own words.
package serialline

import (
	"errors"
	"fmt"
	"strconv"

	"go.bug.st/serial"
)

// Settings are a serial line's settings.
type Settings struct {
	Baud     int
	Parity   byte // 'N', 'E' or 'O'
	DataBits int  // 7 or 8
	StopBits int  // 1 or 2
}

// Default is what a serial URL without settings means: 9600 8N1.
var Default = Settings{Baud: 9600, Parity: 'N', DataBits: 8, StopBits: 1}

// The baud rates a line may be given: the slowest and fastest a USB
// adapter or UART is set to.
const (
	MinBaud = 300
	MaxBaud = 4000000
)

// Keys are a serial URL's query keys, in the order messages list them.
var Keys = []string{"baud", "parity", "data_bits", "stop_bits"}

// ErrUnknownKey is a query key that is not one of [Keys].
var ErrUnknownKey = errors.New("unknown setting")

// ParseBaud is a baud rate from MinBaud to MaxBaud.
func ParseBaud(v string) (int, error) {
	n, err := strconv.Atoi(v)
	if err != nil || n < MinBaud || n > MaxBaud {
		return 0, fmt.Errorf("must be an integer from %d to %d", MinBaud, MaxBaud)
	}
	return n, nil
}

// ParseParity is N (none), E (even) or O (odd).
func ParseParity(v string) (byte, error) {
	if v != "N" && v != "E" && v != "O" {
		return 0, errors.New("must be N, E or O")
	}
	return v[0], nil
}

// CheckDataBits: a character is 7 or 8 data bits.
func CheckDataBits(n int) error {
	if n != 7 && n != 8 {
		return errors.New("must be 7 or 8")
	}
	return nil
}

// CheckStopBits: a character ends with 1 or 2 stop bits.
func CheckStopBits(n int) error {
	if n != 1 && n != 2 {
		return errors.New("must be 1 or 2")
	}
	return nil
}

// Set parses the value of one of [Keys] into s, which an error leaves as
// it was; [ErrUnknownKey] for another key.
func (s *Settings) Set(key, v string) error {
	switch key {
	case "baud":
		n, err := ParseBaud(v)
		if err != nil {
			return err
		}
		s.Baud = n
	case "parity":
		p, err := ParseParity(v)
		if err != nil {
			return err
		}
		s.Parity = p
	case "data_bits":
		n, _ := strconv.Atoi(v) // 0 when not a number, which the check refuses
		if err := CheckDataBits(n); err != nil {
			return err
		}
		s.DataBits = n
	case "stop_bits":
		n, _ := strconv.Atoi(v)
		if err := CheckStopBits(n); err != nil {
			return err
		}
		s.StopBits = n
	default:
		return ErrUnknownKey
	}
	return nil
}

// CharBits is the length of one character on the line: start, data, parity
// and stop bits (11 for 8E1 and 8N2, 10 for 8N1).
func (s Settings) CharBits() int {
	n := 1 + s.DataBits + s.StopBits
	if s.Parity != 'N' && s.Parity != 0 {
		n++
	}
	return n
}

// Mode is the settings as go.bug.st/serial opens a port with them; a
// parity other than E or O is none, stop bits other than 2 are one.
func (s Settings) Mode() *serial.Mode {
	m := &serial.Mode{BaudRate: s.Baud, DataBits: s.DataBits, Parity: serial.NoParity, StopBits: serial.OneStopBit}
	switch s.Parity {
	case 'E':
		m.Parity = serial.EvenParity
	case 'O':
		m.Parity = serial.OddParity
	}
	if s.StopBits == 2 {
		m.StopBits = serial.TwoStopBits
	}
	return m
}

// String is the settings as people write them: "9600 8N1".
func (s Settings) String() string {
	return fmt.Sprintf("%d %d%c%d", s.Baud, s.DataBits, s.Parity, s.StopBits)
}
