package testtool

import (
	"context"
	"io"
	"net"
	"runtime"
	"strings"
	"testing"
)

func TestInCI(t *testing.T) {
	for v, want := range map[string]bool{
		"true": true, "TRUE": true, "1": true, "yes": true, "Yes": true,
		"": false, "false": false, "0": false, "no": false, "ci": false,
	} {
		t.Setenv("CI", v)
		if got := InCI(); got != want {
			t.Errorf("CI=%q: InCI() = %v, want %v", v, got, want)
		}
	}
}

// recorder is a testing.TB that records how a helper ended the test
// instead of ending it.
type recorder struct {
	testing.TB
	skipped, failed bool
	msg             string
}

func (r *recorder) Helper() {}

func (r *recorder) Skip(args ...any) {
	r.skipped, r.msg = true, sprint(args)
	runtime.Goexit()
}

func (r *recorder) Fatal(args ...any) {
	r.failed, r.msg = true, sprint(args)
	runtime.Goexit()
}

func sprint(args []any) string {
	var b strings.Builder
	for _, a := range args {
		b.WriteString(a.(string))
	}
	return b.String()
}

// run calls f with a recorder on a goroutine of its own, as the testing
// package runs a test, so that Skip and Fatal can end it.
func run(f func(testing.TB)) *recorder {
	r := &recorder{}
	done := make(chan struct{})
	go func() { defer close(done); f(r) }()
	<-done
	return r
}

func TestUnsupportedAndMissingSkipLocallyAndFailInCI(t *testing.T) {
	for _, tc := range []struct {
		name string
		call func(testing.TB)
		want string
	}{
		{"Unsupported", func(tb testing.TB) { Unsupported(tb, "no IPv6 loopback") }, "no IPv6 loopback"},
		{"Missing", func(tb testing.TB) { Missing(tb, "mosquitto", "mosquitto") }, "apt-get install -y mosquitto"},
		{"RequireSbin", func(tb testing.TB) { RequireSbin(tb, "no-such-tool-fieldlink", "nothing") }, "no-such-tool-fieldlink"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			t.Setenv("CI", "")
			if r := run(tc.call); !r.skipped || r.failed || !strings.Contains(r.msg, tc.want) {
				t.Errorf("locally: skipped=%v failed=%v %q; want a skip naming %q", r.skipped, r.failed, r.msg, tc.want)
			}
			t.Setenv("CI", "true")
			if r := run(tc.call); r.skipped || !r.failed || !strings.Contains(r.msg, tc.want) {
				t.Errorf("in CI: skipped=%v failed=%v %q; want a failure naming %q", r.skipped, r.failed, r.msg, tc.want)
			}
		})
	}
}

func TestMosquittoConfigLaterLinesOverride(t *testing.T) {
	c := MosquittoConfig(1883, "allow_anonymous false", "password_file /x")
	if !strings.HasPrefix(c, "listener 1883 127.0.0.1\n") {
		t.Errorf("config does not start with the loopback listener:\n%s", c)
	}
	if strings.LastIndex(c, "allow_anonymous false") < strings.Index(c, "allow_anonymous true") {
		t.Errorf("the extra line does not come after the default:\n%s", c)
	}
}

func TestServeLoopbackStopsAndWaits(t *testing.T) {
	stopped := make(chan struct{})
	var addr string
	t.Run("serve", func(t *testing.T) {
		addr = ServeLoopback(t, func(ctx context.Context, ln net.Listener) error {
			defer close(stopped)
			go func() { <-ctx.Done(); ln.Close() }()
			for {
				c, err := ln.Accept()
				if err != nil {
					if ctx.Err() != nil {
						return nil
					}
					return err
				}
				_, _ = io.WriteString(c, "hello")
				c.Close()
			}
		})
		c, err := net.Dial("tcp", addr)
		if err != nil {
			t.Fatal(err)
		}
		defer c.Close()
		if b, _ := io.ReadAll(c); string(b) != "hello" {
			t.Errorf("read %q from %s", b, addr)
		}
	})
	select {
	case <-stopped:
	default:
		t.Fatal("serve still running after the test that started it ended")
	}
	if c, err := net.Dial("tcp", addr); err == nil {
		c.Close()
		t.Errorf("%s still accepts connections", addr)
	}
}

func TestMosquittoKillAndStartKeepThePort(t *testing.T) {
	m := NewMosquitto(t, FindMosquitto(t))
	addr := m.Addr()
	m.Kill()
	if c, err := net.Dial("tcp", addr); err == nil {
		c.Close()
		t.Fatalf("%s accepts connections after Kill", addr)
	}
	m.Start()
	if m.Addr() != addr {
		t.Fatalf("Start moved the broker from %s to %s", addr, m.Addr())
	}
	c, err := net.Dial("tcp", addr)
	if err != nil {
		t.Fatalf("after Start: %v", err)
	}
	c.Close()
}

func TestSyncBufferConcurrentWriters(t *testing.T) {
	var b SyncBuffer
	done := make(chan struct{})
	for range 4 {
		go func() {
			defer func() { done <- struct{}{} }()
			for range 100 {
				_, _ = b.Write([]byte("x"))
				_ = b.String()
			}
		}()
	}
	for range 4 {
		<-done
	}
	if n := len(b.String()); n != 400 {
		t.Fatalf("%d bytes, want 400", n)
	}
}
