package main

// What the end-to-end tests run and watch: the HTTP ingest, the gateway
// in-process, its buffer afterwards, its log lines and the brokers' subscribers.

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"net/http"
	"net/http/httptest"
	"regexp"
	"strconv"
	"sync"
	"testing"
	"time"

	"fieldlink/buffer"
	"fieldlink/internal/testtool"
	"fieldlink/internal/testtool/brokertest"
	"fieldlink/packet"
)

// e2eDeadLetteredRE matches the delivery loop's dead-letter log line.
var e2eDeadLetteredRE = regexp.MustCompile(`dead-lettered.* seq=(\d+)`)

// e2eDeadLettered returns the seqs the gateway's log says it dead-lettered.
func e2eDeadLettered(log string) map[uint64]bool {
	out := map[uint64]bool{}
	for _, m := range e2eDeadLetteredRE.FindAllStringSubmatch(log, -1) {
		if s, err := strconv.ParseUint(m[1], 10, 64); err == nil {
			out[s] = true
		}
	}
	return out
}

// e2eIngest is an httptest upstream that answers every POST with one status
// and records the seqs of the packets it was sent.
type e2eIngest struct {
	*httptest.Server
	mu   sync.Mutex
	got  map[uint64]int
	reqs int
	bad  []string
}

func e2eNewIngest(t *testing.T, status int) *e2eIngest {
	in := &e2eIngest{got: map[uint64]int{}}
	in.Server = httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		body, err := io.ReadAll(r.Body)
		in.mu.Lock()
		defer in.mu.Unlock()
		in.reqs++
		if err != nil {
			in.bad = append(in.bad, err.Error())
		}
		var parts []json.RawMessage
		if b := bytes.TrimSpace(body); len(b) > 0 && b[0] == '[' {
			if err := json.Unmarshal(b, &parts); err != nil {
				in.bad = append(in.bad, err.Error())
			}
		} else {
			parts = []json.RawMessage{body}
		}
		for _, p := range parts {
			pk, err := packet.Decode(p)
			if err != nil {
				in.bad = append(in.bad, err.Error())
				continue
			}
			if err := testtool.CheckPacket(p); err != nil {
				in.bad = append(in.bad, err.Error())
			}
			in.got[pk.Seq]++
		}
		w.WriteHeader(status)
	}))
	t.Cleanup(func() {
		in.Close()
		in.mu.Lock()
		defer in.mu.Unlock()
		for _, b := range in.bad {
			t.Errorf("upstream %d got a bad body: %s", status, b)
		}
	})
	return in
}

func (in *e2eIngest) requests() int {
	in.mu.Lock()
	defer in.mu.Unlock()
	return in.reqs
}

func (in *e2eIngest) seqs() map[uint64]int {
	in.mu.Lock()
	defer in.mu.Unlock()
	out := make(map[uint64]int, len(in.got))
	for s, n := range in.got {
		out[s] = n
	}
	return out
}

// e2eGateway is `gateway run -print` running in-process under its own
// context, as the daemon runs under a signal's.
type e2eGateway struct {
	cancel context.CancelFunc
	done   chan error
	stderr *testtool.SyncBuffer
	once   sync.Once
	err    error
}

// e2eStartGateway runs `gateway run -c site -print`; stdout gets each packet
// once stored, with its Seq. The gateway is stopped when the test ends.
func e2eStartGateway(t *testing.T, site string, stdout io.Writer, level string) *e2eGateway {
	t.Helper()
	ctx, cancel := context.WithCancel(context.Background())
	g := &e2eGateway{cancel: cancel, done: make(chan error, 1), stderr: &testtool.SyncBuffer{}}
	go func() {
		g.done <- cmdRun(ctx, []string{"-c", site, "-log-level", level, "-print"}, stdout, g.stderr)
	}()
	t.Cleanup(func() {
		_ = g.stop(t)
		if t.Failed() {
			log := g.stderr.String()
			if len(log) > 20000 {
				log = "…" + log[len(log)-20000:]
			}
			t.Logf("gateway log:\n%s", log)
		}
	})
	return g
}

// stop cancels the gateway's context and waits for cmdRun to return.
func (g *e2eGateway) stop(t *testing.T) error {
	t.Helper()
	g.once.Do(func() {
		g.cancel()
		select {
		case g.err = <-g.done:
		case <-time.After(60 * time.Second):
			g.err = errors.New("did not stop within 60s of its context's end")
		}
	})
	return g.err
}

// e2eLeftInBuffer opens the buffer of a stopped gateway and returns the
// seqs still queued, its dead letters (seq → reason) and its statistics.
func e2eLeftInBuffer(t *testing.T, path string) (map[uint64]bool, map[uint64]string, buffer.Stats) {
	t.Helper()
	q, err := buffer.Open(path, buffer.Options{Logger: slog.New(slog.DiscardHandler)})
	if err != nil {
		t.Fatalf("open the stopped gateway's buffer: %v", err)
	}
	defer q.Close()
	left := map[uint64]bool{}
	if err := q.Each(func(r buffer.Record) error { left[r.Seq] = true; return nil }); err != nil {
		t.Fatal(err)
	}
	if q.Len() != len(left) {
		t.Errorf("buffer Len %d, but Each visits %d records", q.Len(), len(left))
	}
	dead := map[uint64]string{}
	if err := q.EachDead(func(r buffer.Record, reason string) error { dead[r.Seq] = reason; return nil }); err != nil {
		t.Fatal(err)
	}
	st := q.Stats()
	if st.DeadDepth != len(dead) {
		t.Errorf("buffer DeadDepth %d, but EachDead visits %d dead letters", st.DeadDepth, len(dead))
	}
	return left, dead, st
}

// e2eLineWriter calls fn with each complete line written to it.
type e2eLineWriter struct {
	mu   sync.Mutex
	rest []byte
	fn   func([]byte)
}

func (w *e2eLineWriter) Write(p []byte) (int, error) {
	w.mu.Lock()
	defer w.mu.Unlock()
	w.rest = append(w.rest, p...)
	for {
		i := bytes.IndexByte(w.rest, '\n')
		if i < 0 {
			break
		}
		w.fn(w.rest[:i])
		w.rest = w.rest[i+1:]
	}
	return len(p), nil
}

// e2eSubscribe connects a subscriber straight to the broker at addr,
// subscribed to fieldlink/# at QoS 1; every message goes to got, a lost
// connection to problem.
func e2eSubscribe(t *testing.T, addr, name string, got func(topic string, payload []byte), problem func(string)) {
	t.Helper()
	brokertest.Subscribe(t, brokertest.Options{
		Name:    "subscriber " + name,
		ID:      "e2e-subscriber-" + name,
		Brokers: []string{addr},
		Quiesce: 100,
		Lost: func(err error) {
			problem(fmt.Sprintf("subscriber of broker %s lost its connection: %v", name, err))
		},
	}, "fieldlink/#", got)
}
