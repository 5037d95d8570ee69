package emulator

import (
	"errors"
	"testing"
)

func TestClamp(t *testing.T) {
	if f, err := Clamp(-1, -1); f != nil || err != nil {
		t.Errorf("Clamp(-1, -1) = %v, %v; want no clamp", f != nil, err)
	}
	f, err := Clamp(10, -1)
	if err != nil || f(0, 3) != 10 || f(0, 0xFFFF) != 0xFFFF {
		t.Errorf("Clamp(10, -1): %v", err)
	}
	for _, b := range [][2]int{{5, 4}, {-2, 3}, {0, 0x10000}} {
		if _, err := Clamp(b[0], b[1]); err == nil {
			t.Errorf("Clamp(%d, %d) took it", b[0], b[1])
		}
	}
}

func TestParseParity(t *testing.T) {
	for _, p := range []string{"N", "E", "O"} {
		if b, err := ParseParity(p); err != nil || b != p[0] {
			t.Errorf("ParseParity(%s) = %c, %v", p, b, err)
		}
	}
	if _, err := ParseParity("e"); err == nil {
		t.Error(`ParseParity("e") took it`)
	}
}

func TestListenURL(t *testing.T) {
	for _, ok := range []string{"tcp://127.0.0.1:1502", "rtuovertcp://localhost:0", "tcp://[::1]:502"} {
		if _, err := ListenURL(ok, false); err != nil {
			t.Errorf("%s: %v", ok, err)
		}
	}
	for _, bad := range []string{"udp://127.0.0.1:1", "tcp://", "127.0.0.1:502"} {
		if _, err := ListenURL(bad, true); err == nil || errors.Is(err, ErrNotLoopback) {
			t.Errorf("%s: %v, want a syntax error", bad, err)
		}
	}
	if _, err := ListenURL("tcp://0.0.0.0:1502", false); !errors.Is(err, ErrNotLoopback) {
		t.Errorf("0.0.0.0 without allowRemote: %v", err)
	}
	if _, err := ListenURL("tcp://0.0.0.0:1502", true); err != nil {
		t.Errorf("0.0.0.0 with allowRemote: %v", err)
	}
}
