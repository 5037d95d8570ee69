package downlink

import (
	"context"
	"crypto/ed25519"
	"errors"
	"fmt"
	"strings"
	"sync"
	"testing"
	"time"

	"fieldlink/config"
	firmwareprofiles "fieldlink/firmware-profiles"
	"fieldlink/internal/testtool"
	"fieldlink/packet"
	"fieldlink/sensors"
	"fieldlink/sensors/profile"
)

// These are unit tests of the engine's rules, over a fake site and an
// in-memory ledger; the agent's tests run the same commands against the
// emulator and pymodbus over a real buffer file.

var e0 = time.Date(2026, 12, 2, 8, 0, 0, 0, time.UTC)

const engineSite = `site: {id: "001"}
gateway: {id: gw-01}
buses:
  - name: field
    url: tcp://127.0.0.1:1502
    devices:
      - name: valve-1
        profile: generic-irrigation-valve
        slave: 4
        writable:
          - {point: ValveOpen}
          - {point: Setpoint, min: 0, max: 100, step: 0.5, idempotent: true,
             interlock: [{device: th-1, point: Temperature, above: 0.2, max_age: 10s}]}
          - {point: FlowTotal}
      - name: th-1
        profile: renke-rs-ws-n01
        slave: 5
uplink: {upstreams: [{url: 'mqtt://127.0.0.1:1883'}]}
downlink: {enabled: true, allow_unsigned: true}
`

type fakeSite struct {
	mu       sync.Mutex
	writes   []string
	out      sensors.WriteResult // returned by every write
	err      error
	latest   map[string]sensors.Reading
	failures int // the first writes fail with lost replies
}

var errLost = errors.New("no reply (timeout)")
var errRefused = errors.New("exception 3")

func (s *fakeSite) Write(ctx context.Context, device, point string, v float64) (sensors.WriteResult, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.writes = append(s.writes, fmt.Sprintf("%s.%s=%v", device, point, v))
	if s.err != nil {
		return sensors.WriteResult{}, s.err
	}
	if s.failures > 0 {
		s.failures--
		return sensors.WriteResult{Err: errLost, Readback: packet.Float(v-1, 1)}, nil
	}
	return s.out, nil
}

func (s *fakeSite) Latest(device, point string, now time.Time) (sensors.Reading, bool) {
	p, ok := s.latest[device+"."+point]
	return p, ok
}

type memLedger struct {
	mu      sync.Mutex
	seen    map[string]*Result
	log     []Result
	refused []Result
	// refusedCmds are the commands handed to Refused (nil: none).
	refusedCmds []*Command
}

func (l *memLedger) Begin(cmd Command, now time.Time) (*Result, error) {
	l.mu.Lock()
	defer l.mu.Unlock()
	if r, ok := l.seen[cmd.ID]; ok {
		return r, nil
	}
	l.seen[cmd.ID] = &Result{ID: cmd.ID, Status: StatusPending}
	return nil, nil
}

func (l *memLedger) Refused(cmd *Command, res Result) error {
	l.mu.Lock()
	defer l.mu.Unlock()
	l.refused = append(l.refused, res)
	l.refusedCmds = append(l.refusedCmds, cmd)
	return nil
}

func (l *memLedger) Finish(res Result) error {
	l.mu.Lock()
	defer l.mu.Unlock()
	l.seen[res.ID] = &res
	l.log = append(l.log, res)
	return nil
}

type rig struct {
	e         *Engine
	site      *fakeSite
	ledger    *memLedger
	published []Result
	packets   []*packet.Packet
	now       time.Time
}

func engineConfig(t *testing.T) *config.Config {
	t.Helper()
	c, err := config.Parse("site.yaml", []byte(engineSite), func(dir string) (profile.Set, error) { return profile.Load(firmwareprofiles.FS, dir) })
	if err != nil {
		t.Fatal(err)
	}
	return c
}

func newRig(t *testing.T, keys ...ed25519.PublicKey) *rig {
	t.Helper()
	c := engineConfig(t)
	r := &rig{site: &fakeSite{latest: map[string]sensors.Reading{}}, ledger: &memLedger{seen: map[string]*Result{}}, now: e0}
	r.site.latest["th-1.Temperature"] = sensors.Reading{Value: packet.Float(21.5, 1), At: e0.Add(-2 * time.Second), Quality: sensors.Good}
	r.e = NewEngine(c, Options{
		Points: r.site, Ledger: r.ledger, Keys: keys,
		Errors: Errors{Refused: func(err error) bool { return errors.Is(err, errRefused) }},
		Emit: func(p *packet.Packet) {
			// As the gateway sends it: stamped with the site's fields.
			sp := *p
			(&packet.Stamper{SiteID: "001", GatewayID: "gw-1", Epoch: "0123abcd"}).Stamp(&sp)
			testtool.ValidPacket(t, sp.AppendJSON(nil, packet.Strings))
			r.packets = append(r.packets, p)
		},
		Publish: func(res Result) { r.published = append(r.published, res) },
		Now:     func() time.Time { return r.now },
	})
	return r
}

func cmdJSON(id, point, value string, issued time.Time) string {
	return fmt.Sprintf(`{"id":%q,"device":"valve-1","point":%q,"value":%s,"issued_at":%q,"actor":"ops:alice"}`, id, point, value, issued.Format(time.RFC3339))
}

func TestEngineRules(t *testing.T) {
	for _, tc := range []struct {
		name    string
		cmd     string
		setup   func(*rig)
		status  Status
		reason  string
		written string // the write the site saw, "" for none
	}{
		{name: "done after a matching read-back", cmd: cmdJSON("c1", "Setpoint", "42.5", e0),
			setup: func(r *rig) { r.site.out = sensors.WriteResult{Readback: packet.Float(42.5, 1)} }, status: StatusDone, written: "valve-1.Setpoint=42.5"},
		{name: "coil false is written", cmd: cmdJSON("c2", "ValveOpen", "false", e0),
			setup: func(r *rig) { r.site.out = sensors.WriteResult{Readback: packet.Bool(false)} }, status: StatusDone, written: "valve-1.ValveOpen=0"},
		{name: "clamped by the device", cmd: cmdJSON("c3", "Setpoint", "42.5", e0),
			setup: func(r *rig) { r.site.out = sensors.WriteResult{Readback: packet.Float(40, 1)} }, status: StatusFailed, reason: "reads back 40.0, not 42.5", written: "valve-1.Setpoint=42.5"},
		{name: "refused by the device", cmd: cmdJSON("c4", "ValveOpen", "true", e0),
			setup:  func(r *rig) { r.site.out = sensors.WriteResult{Err: errRefused, Readback: packet.Bool(false)} },
			status: StatusFailed, reason: "refused", written: "valve-1.ValveOpen=1"},
		{name: "lost reply settled by read-back", cmd: cmdJSON("c5", "ValveOpen", "true", e0),
			setup:  func(r *rig) { r.site.out = sensors.WriteResult{Err: errLost, Readback: packet.Bool(true)} },
			status: StatusDone, reason: "settled by reading", written: "valve-1.ValveOpen=1"},
		{name: "lost reply not settled, not idempotent: written once", cmd: cmdJSON("c6", "FlowTotal", "0", e0),
			setup:  func(r *rig) { r.site.out = sensors.WriteResult{Err: errLost, Readback: packet.Int(1500)} },
			status: StatusUnknownOutcome, reason: "reads back 1500", written: "valve-1.FlowTotal=0"},
		{name: "lost reply, idempotent: retried", cmd: cmdJSON("c7", "Setpoint", "50", e0),
			setup:  func(r *rig) { r.site.failures = 2; r.site.out = sensors.WriteResult{Readback: packet.Float(50, 1)} },
			status: StatusDone, written: "valve-1.Setpoint=50 valve-1.Setpoint=50 valve-1.Setpoint=50"},
		{name: "expired", cmd: `{"id":"c8","device":"valve-1","point":"ValveOpen","value":true,"issued_at":"2026-12-02T07:59:50Z","expires_at":"2026-12-02T07:59:59Z"}`,
			status: StatusExpired, reason: "expired at"},
		{name: "older than max_age", cmd: cmdJSON("c9", "ValveOpen", "true", e0.Add(-2*time.Minute)), status: StatusExpired, reason: "more than max_age 1m0s"},
		{name: "from the future", cmd: cmdJSON("c10", "ValveOpen", "true", e0.Add(time.Hour)), status: StatusRejected, reason: "ahead of the gateway's clock"},
		{name: "point not writable here", cmd: cmdJSON("c11", "PressureLimit", "3", e0), status: StatusRejected, reason: "not writable on this gateway"},
		{name: "a writable point's name mistyped", cmd: cmdJSON("c21", "Setpiont", "3", e0), status: StatusRejected, reason: `valve-1.Setpiont is not writable on this gateway (did you mean "Setpoint"?)`},
		{name: "no such device", cmd: `{"id":"c22","device":"valve-2","point":"ValveOpen","value":true,"issued_at":"2026-12-02T08:00:00Z"}`,
			status: StatusRejected, reason: `no device valve-2 on this gateway (did you mean "valve-1"?)`},
		{name: "above max", cmd: cmdJSON("c12", "Setpoint", "101", e0), status: StatusRejected, reason: "above max 100"},
		{name: "off step", cmd: cmdJSON("c13", "Setpoint", "42.25", e0), status: StatusRejected, reason: "whole number of steps of 0.5"},
		{name: "bool to a number", cmd: cmdJSON("c14", "Setpoint", "true", e0), status: StatusRejected, reason: "takes a number"},
		{name: "number to a coil", cmd: cmdJSON("c15", "ValveOpen", "1", e0), status: StatusRejected, reason: "takes true or false"},
		{name: "interlock reading stale", cmd: cmdJSON("c16", "Setpoint", "10", e0),
			setup: func(r *rig) {
				r.site.latest["th-1.Temperature"] = sensors.Reading{Value: packet.Float(21.5, 1), At: e0.Add(-time.Minute), Quality: sensors.Stale}
			}, status: StatusRejected, reason: "too old to rely on"},
		{name: "interlock reading absent", cmd: cmdJSON("c17", "Setpoint", "10", e0),
			setup: func(r *rig) { delete(r.site.latest, "th-1.Temperature") }, status: StatusRejected, reason: "has no reading"},
		{name: "interlock condition false", cmd: cmdJSON("c18", "Setpoint", "10", e0),
			setup: func(r *rig) {
				r.site.latest["th-1.Temperature"] = sensors.Reading{Value: packet.Float(0.1, 1), At: e0, Quality: sensors.Good}
			}, status: StatusRejected, reason: "not above 0.2"},
		{name: "value the register cannot hold", cmd: cmdJSON("c19", "FlowTotal", "1e12", e0),
			status: StatusRejected, reason: "cannot be written: 1e12 is raw 1000000000000, outside int32"},
		{name: "value the bus's encoding refuses", cmd: cmdJSON("c21", "FlowTotal", "5", e0),
			setup: func(r *rig) { r.site.err = fmt.Errorf("x: %w", profile.ErrNotWritable) }, status: StatusRejected, reason: "cannot be written", written: "valve-1.FlowTotal=5"},
		{name: "not parseable", cmd: `{"id":"c20","device":"valve-1"}`, status: StatusRejected, reason: "point"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			r := newRig(t)
			if tc.setup != nil {
				tc.setup(r)
			}
			res := r.e.Handle(context.Background(), []byte(tc.cmd))
			if res.Status != tc.status || !strings.Contains(res.Reason, tc.reason) {
				t.Fatalf("result %+v, want %s with a reason saying %q", res, tc.status, tc.reason)
			}
			if got := strings.Join(r.site.writes, " "); got != tc.written {
				t.Errorf("writes %q, want %q", got, tc.written)
			}
			if len(r.published) != 1 || r.published[0] != res {
				t.Errorf("published %+v, want the result once", r.published)
			}
			if res.ID == "" || tc.name == "not parseable" {
				return
			}
			if audited := append(r.ledger.log, r.ledger.refused...); len(audited) != 1 || audited[0] != res {
				t.Errorf("audited %+v, want the result", audited)
			}
			if _, kept := r.ledger.seen[res.ID]; kept == (res.Status == StatusExpired || tc.name == "from the future") {
				t.Errorf("id kept: %v; a command too late or too early is never run, and its id is not kept", kept)
			}
			device := "valve-1"
			if tc.name == "no such device" {
				device = "valve-2"
			}
			if len(r.packets) != 1 || r.packets[0].DataType != "Command" || r.packets[0].DeviceID != device {
				t.Fatalf("buffered %+v, want one Command packet", r.packets)
			}
			if got := r.packets[0].Fields[3]; got.Name != "Status" || got.Value.String() != string(tc.status) {
				t.Errorf("packet status field %+v", got)
			}
		})
	}
}

// The same command twice runs once; the second gets the first result.
func TestEngineRunsAnIDOnce(t *testing.T) {
	r := newRig(t)
	r.site.out = sensors.WriteResult{Readback: packet.Bool(true)}
	c := cmdJSON("dup", "ValveOpen", "true", e0)
	first := r.e.Handle(context.Background(), []byte(c))
	second := r.e.Handle(context.Background(), []byte(c))
	if len(r.site.writes) != 1 || first.Status != StatusDone || second != first {
		t.Errorf("writes %v; results %+v then %+v", r.site.writes, first, second)
	}
	if len(r.packets) != 1 {
		t.Errorf("%d Command packets, want 1", len(r.packets))
	}
}

// With keys set, only commands signed by one of them run; a forged one
// does not take the id of the real one.
func TestEngineSignedMode(t *testing.T) {
	pub, priv, _ := ed25519.GenerateKey(nil)
	_, other, _ := ed25519.GenerateKey(nil)
	r := newRig(t, pub)
	r.site.out = sensors.WriteResult{Readback: packet.Bool(true)}
	unsigned := strings.Replace(cmdJSON("s1", "ValveOpen", "true", e0), `"device"`, `"site":"001","gateway":"gw-01","device"`, 1)
	cmd, err := ParseCommand([]byte(unsigned))
	if err != nil {
		t.Fatal(err)
	}
	for name, payload := range map[string][]byte{
		"unsigned":  []byte(unsigned),
		"wrong key": Sign(cmd, other).JSON(),
		"altered":   []byte(strings.Replace(string(Sign(cmd, priv).JSON()), `"value":true`, `"value":false`, 1)),
	} {
		if res := r.e.Handle(context.Background(), payload); res.Status != StatusRejected {
			t.Errorf("%s: %+v, want rejected", name, res)
		}
	}
	if len(r.site.writes) != 0 {
		t.Fatalf("rejected commands wrote %v", r.site.writes)
	}
	if len(r.ledger.refused) != 3 || len(r.ledger.seen) != 0 {
		t.Fatalf("audited %d refusals and kept %d ids; want 3 refusals and no id taken", len(r.ledger.refused), len(r.ledger.seen))
	}
	if res := r.e.Handle(context.Background(), Sign(cmd, priv).JSON()); res.Status != StatusDone {
		t.Errorf("signed: %+v, want done", res)
	}
	if res := r.e.Handle(context.Background(), Sign(cmd, priv).JSON()); res.Status != StatusDone || len(r.site.writes) != 1 {
		t.Errorf("replayed: %+v and %d writes, want the first result and one write", res, len(r.site.writes))
	}
}

// Describe reads the writable points while a reload's Configure replaces
// them: under -race, the two must not race.
func TestEngineDescribeDuringReload(t *testing.T) {
	r := newRig(t)
	c := engineConfig(t)
	want := "valve-1.FlowTotal, valve-1.Setpoint, valve-1.ValveOpen"
	var wg sync.WaitGroup
	wg.Go(func() {
		for range 200 {
			r.e.Configure(c, nil)
		}
	})
	for range 200 {
		if got := r.e.Describe(); got != want {
			t.Fatalf("Describe() = %q, want %q", got, want)
		}
	}
	wg.Wait()
}

// A command with a device, point or actor that would not parse back is
// refused before the ledger, and reaches the audit log without them: the
// log must stay readable. RunLocal skips the signature, not these checks.
func TestEngineRefusesUnreadableNames(t *testing.T) {
	r := newRig(t)
	r.site.out = sensors.WriteResult{Readback: packet.Float(10, 1)}
	for name, cmd := range map[string]Command{
		"long device": {ID: "l1", Device: strings.Repeat("v", maxNameLength+1), Point: "Setpoint", Value: Number(10), IssuedAt: NewTimestamp(e0)},
		"bad point":   {ID: "l2", Device: "valve-1", Point: "Set\x00point", Value: Number(10), IssuedAt: NewTimestamp(e0)},
		"long actor":  {ID: "l3", Device: "valve-1", Point: "Setpoint", Value: Number(10), IssuedAt: NewTimestamp(e0), Actor: strings.Repeat("a", maxNameLength+1)},
		"bad id":      {ID: "l 4", Device: "valve-1", Point: "Setpoint", Value: Number(10), IssuedAt: NewTimestamp(e0)},
	} {
		if res := r.e.RunLocal(context.Background(), cmd); res.Status != StatusRejected {
			t.Errorf("%s: %+v, want rejected", name, res)
		}
	}
	if len(r.site.writes) != 0 || len(r.ledger.seen) != 0 {
		t.Fatalf("writes %v, ids kept %d; want none", r.site.writes, len(r.ledger.seen))
	}
	if len(r.ledger.refused) != 4 {
		t.Fatalf("%d refusals audited, want 4", len(r.ledger.refused))
	}
	for i, c := range r.ledger.refusedCmds {
		if c != nil {
			if _, err := ParseCommand(c.JSON()); err != nil {
				t.Errorf("refusal %d audited with a command that does not parse back: %v", i, err)
			}
		}
	}
}
