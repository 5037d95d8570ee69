package metrics

import (
	"errors"
	"testing"
)

func TestLoopbackHost(t *testing.T) {
	for host, want := range map[string]error{
		"":                 ErrEveryInterface,
		"127.0.0.1":        nil,
		"127.1.2.3":        nil,
		"::1":              nil,
		"::ffff:127.0.0.1": nil,
		"localhost":        nil,
		"gw.example":       nil,
		"0.0.0.0":          ErrNotLoopback,
		"192.168.1.10":     ErrNotLoopback,
		"::":               ErrNotLoopback,
		"::ffff:10.0.0.1":  ErrNotLoopback,
	} {
		if err := LoopbackHost(host); !errors.Is(err, want) || (want == nil && err != nil) {
			t.Errorf("LoopbackHost(%q) = %v, want %v", host, err, want)
		}
	}
}
