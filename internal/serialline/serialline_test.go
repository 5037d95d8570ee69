package serialline

import (
	"errors"
	"testing"

	"go.bug.st/serial"
)

func TestSet(t *testing.T) {
	s := Default
	for _, kv := range [][2]string{{"baud", "4800"}, {"parity", "E"}, {"data_bits", "7"}, {"stop_bits", "2"}} {
		if err := s.Set(kv[0], kv[1]); err != nil {
			t.Fatalf("Set(%s, %s): %v", kv[0], kv[1], err)
		}
	}
	if want := (Settings{Baud: 4800, Parity: 'E', DataBits: 7, StopBits: 2}); s != want {
		t.Fatalf("got %+v, want %+v", s, want)
	}
	if s.String() != "4800 7E2" || s.CharBits() != 11 {
		t.Errorf("String, CharBits = %q, %d; want 4800 7E2, 11", s.String(), s.CharBits())
	}
	for _, kv := range [][3]string{
		{"baud", "fast", "must be an integer from 300 to 4000000"},
		{"baud", "299", "must be an integer from 300 to 4000000"},
		{"parity", "e", "must be N, E or O"},
		{"data_bits", "9", "must be 7 or 8"},
		{"data_bits", "x", "must be 7 or 8"},
		{"stop_bits", "0", "must be 1 or 2"},
	} {
		before := s
		if err := s.Set(kv[0], kv[1]); err == nil || err.Error() != kv[2] {
			t.Errorf("Set(%s, %q) = %v, want %s", kv[0], kv[1], err, kv[2])
		}
		if s != before {
			t.Errorf("Set(%s, %q) changed the settings to %+v", kv[0], kv[1], s)
		}
	}
	if err := s.Set("flow", "rts"); !errors.Is(err, ErrUnknownKey) {
		t.Errorf("Set(flow) = %v, want ErrUnknownKey", err)
	}
}

func TestCharBits(t *testing.T) {
	for _, c := range []struct {
		s    Settings
		want int
	}{{Settings{Parity: 'E', DataBits: 8, StopBits: 1}, 11}, {Settings{Parity: 'N', DataBits: 8, StopBits: 2}, 11}, {Default, 10}} {
		if got := c.s.CharBits(); got != c.want {
			t.Errorf("%v: %d bits, want %d", c.s, got, c.want)
		}
	}
}

func TestMode(t *testing.T) {
	m := Settings{Baud: 19200, Parity: 'E', DataBits: 8, StopBits: 2}.Mode()
	if m.BaudRate != 19200 || m.DataBits != 8 || m.Parity != serial.EvenParity || m.StopBits != serial.TwoStopBits {
		t.Errorf("19200 8E2: %+v", *m)
	}
	if m := (Settings{Baud: 9600, Parity: 'O', DataBits: 7, StopBits: 1}).Mode(); m.Parity != serial.OddParity || m.StopBits != serial.OneStopBit || m.DataBits != 7 {
		t.Errorf("9600 7O1: %+v", *m)
	}
	if m := Default.Mode(); m.Parity != serial.NoParity || m.StopBits != serial.OneStopBit {
		t.Errorf("9600 8N1: %+v", *m)
	}
}
