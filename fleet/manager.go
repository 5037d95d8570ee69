package fleet

import (
	"context"
	"crypto/ed25519"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"net/http"
	"slices"
	"sync"
	"time"

	"fieldlink/config"
	"fieldlink/internal/signing"
)

// Probation watch: how often, and how long a breakage must last before
// the bundle is reverted (a reconnect or the first polls take a moment).
const (
	watchEvery = 2 * time.Second
	// Grace before a lost upstream counts: within about a minute of a
	// credential change that breaks every upstream, it is reverted.
	upstreamGrace = 20 * time.Second
	// answeringDrop is the fall in the share of devices answering that
	// reverts a bundle.
	answeringDrop = 0.10
	fetchTimeout  = 30 * time.Second
	// pullEvery is the least time between a pull and an early one (asked
	// on the pull topic, which any user of a broker may publish to): one
	// asked sooner waits for the end of the gap, and those asked meanwhile
	// make that one pull.
	pullEvery = 30 * time.Second
)

// Gateway is the running gateway, as the manager sees it.
type Gateway interface {
	// Reload applies a configuration as SIGHUP does; an error leaves the
	// configuration in force.
	Reload(*config.Config) error
	Vitals() Vitals
	// Report publishes the state (retained) where the platform sees it.
	Report(Report)
}

// Options wire a Manager.
type Options struct {
	Profiles config.ProfileSource
	Client   *http.Client // nil: a client with fetchTimeout
	// Now is the wall clock: a bundle's validity, and the times reported
	// and kept in state.json; nil means time.Now.
	Now func() time.Time
	// Elapsed is a monotonic clock, the time since any fixed origin: it
	// times a probation and its grace, which a step of the wall clock (NTP
	// at boot) must neither shorten nor lengthen. Nil means the monotonic
	// reading time.Now carries.
	Elapsed func() time.Duration
	Log     *slog.Logger
	// Step, if set, is called before each step of applying, confirming
	// and reverting a bundle (tests kill the process there).
	Step func(name string)
	// Grace is how long a breakage must last before a bundle is reverted;
	// 0 means 20s.
	Grace time.Duration
	// WatchEvery is how often a bundle on probation is checked; 0 means 2s.
	WatchEvery time.Duration
	// PullEvery is the least time from a pull to an early one; 0 means
	// 30s.
	PullEvery time.Duration
}

// Manager pulls, applies, watches and reverts bundles for one gateway.
// Its methods may be called from any goroutine.
type Manager struct {
	gw   Gateway
	opt  Options
	s    store
	pull chan struct{}

	mu sync.Mutex
	// local and keys change on SetLocal (SIGHUP).
	local *config.Config
	keys  []ed25519.PublicKey
	st    State
	// The probation in force, by Options.Elapsed: when it began, how long
	// it lasts, and how long each breakage has lasted.
	probStart, probFor time.Duration
	down, fewer        lasting
	// met: the bundle on probation has reached st.Required at least once;
	// best is the best vitals it showed.
	met  bool
	best Vitals
	// inForce is when the configuration in force began in this process
	// (by Options.Elapsed), and seen the best vitals it showed since,
	// off probation: what st.Reached follows.
	inForce time.Duration
	seen    Vitals
	// floor is the highest serial applied on this gateway, kept in its own
	// file; floorErr, when set, says it is unknown (that file and
	// state.json both unreadable), and every bundle is refused.
	floor    uint64
	floorErr error
}

// lasting times how long a condition has held, by Options.Elapsed.
type lasting struct {
	since time.Duration
	on    bool
}

// hold notes whether the condition holds at el, and returns for how long
// it has held without a break.
func (l *lasting) hold(el time.Duration, cond bool) time.Duration {
	if !cond {
		l.on = false
		return 0
	}
	if !l.on {
		l.since, l.on = el, true
	}
	return el - l.since
}

// NewManager returns the manager of local's remote configuration; st is
// the state Startup returned.
func NewManager(local *config.Config, st State, gw Gateway, opt Options) (*Manager, error) {
	keys, err := loadKeys(local)
	if err != nil {
		return nil, err
	}
	if opt.Client == nil {
		opt.Client = &http.Client{Timeout: fetchTimeout}
	}
	if opt.Now == nil {
		opt.Now = time.Now
	}
	if opt.Elapsed == nil {
		origin := time.Now()
		opt.Elapsed = func() time.Duration { return time.Since(origin) }
	}
	if opt.Log == nil {
		opt.Log = slog.New(slog.DiscardHandler)
	}
	if opt.Step == nil {
		opt.Step = func(string) {}
	}
	if opt.Grace <= 0 {
		opt.Grace = upstreamGrace
	}
	if opt.WatchEvery <= 0 {
		opt.WatchEvery = watchEvery
	}
	if opt.PullEvery <= 0 {
		opt.PullEvery = pullEvery
	}
	m := &Manager{local: local, keys: keys, gw: gw, opt: opt, s: store{Dir(local)}, pull: make(chan struct{}, 1), st: st}
	m.inForce = opt.Elapsed()
	m.loadFloor()
	if st.Event == StateProbation {
		// Not a state Startup gave (it reverts a probation): the bundle
		// gets a whole probation from now.
		m.probStart, m.probFor = m.inForce, local.RemoteConfig.Probation
	}
	return m, nil
}

// loadFloor reads the highest serial applied: from its own file, checked
// against state.json, and written again when state.json knows a higher
// one or the file did not check. With both unreadable it is unknown.
func (m *Manager) loadFloor() {
	n, err := m.s.floor()
	_, stateErr := m.s.load()
	if err != nil && stateErr != nil {
		m.floorErr = fmt.Errorf("the highest serial applied is unknown: %s and state.json are both unreadable; remove both to take bundles again (%w)", floorFile, err)
		m.opt.Log.Error("remote configuration: every bundle is refused", "err", m.floorErr)
		return
	}
	if err != nil {
		m.opt.Log.Warn("remote configuration: the highest serial's file is unreadable; taken from state.json", "err", err)
	}
	m.floor = max(n, m.st.highest())
	if m.floor != n || err != nil {
		if err := m.s.saveFloor(m.floor); err != nil {
			m.opt.Log.Error("remote configuration: the highest serial not saved", "err", err)
		}
	}
}

// State returns the remote configuration's state.
func (m *Manager) State() State {
	m.mu.Lock()
	defer m.mu.Unlock()
	return m.st
}

// PullNow asks for a pull at once (an MQTT message on the pull topic).
func (m *Manager) PullNow() {
	select {
	case m.pull <- struct{}{}:
	default:
	}
}

// loadKeys reads the public keys of local's remote_config.keys.
func loadKeys(local *config.Config) ([]ed25519.PublicKey, error) {
	paths := make([]string, len(local.RemoteConfig.Keys))
	for i, k := range local.RemoteConfig.Keys {
		paths[i] = local.Rel(k)
	}
	keys, err := signing.LoadPublicKeys(paths)
	if err != nil {
		return nil, fmt.Errorf("remote_config.keys: %w", err)
	}
	return keys, nil
}

// SetLocal applies a reread local file (SIGHUP): the gateway reloads it
// merged with the bundle in force (on probation or confirmed), then the
// manager merges bundles with it, trusts its keys and pulls from its URL
// at its interval. If a key file cannot be read, the bundle in force does
// not merge with it or the gateway refuses it, nothing changes (gateway
// and manager) and the error says why. Holding the manager's lock
// throughout, no bundle is applied or reverted meanwhile.
func (m *Manager) SetLocal(local *config.Config) error {
	keys, err := loadKeys(local)
	if err != nil {
		m.opt.Log.Error("reread site file refused: the remote configuration's keys in force stay", "err", err)
		return err
	}
	m.mu.Lock()
	defer m.mu.Unlock()
	c := local
	if m.st.Serial != 0 {
		if c, err = loadBundle(m.s, local, m.st.Serial, m.opt.Profiles); err != nil {
			return fmt.Errorf("bundle %d in force, merged with the reread site file: %w", m.st.Serial, err)
		}
	}
	if err := m.gw.Reload(c); err != nil {
		return err
	}
	m.local, m.keys = local, keys
	return nil
}

// remote returns the remote_config section in force.
func (m *Manager) remote() *config.RemoteConfig {
	m.mu.Lock()
	defer m.mu.Unlock()
	return m.local.RemoteConfig
}

// Run pulls at the configured interval (the first pull at once) and on
// PullNow, at most once per Options.PullEvery for those, and watches a
// bundle on probation, until ctx ends. The watch has its own goroutine: a
// configuration server that is slow to answer never delays a revert or a
// confirmation.
func (m *Manager) Run(ctx context.Context) {
	m.report()
	watched := make(chan struct{})
	go func() {
		defer close(watched)
		m.watchLoop(ctx)
	}()
	defer func() { <-watched }()
	next := time.NewTimer(0)
	defer next.Stop()
	// early fires a pull asked too soon after the last one, at the end of
	// the gap; deferred says it is set.
	early := time.NewTimer(0)
	if !early.Stop() {
		<-early.C
	}
	defer early.Stop()
	deferred := false
	var last time.Duration // when the last pull began, by Options.Elapsed
	pull := func() {
		last = m.opt.Elapsed()
		m.fetch(ctx)
	}
	for {
		select {
		case <-ctx.Done():
			return
		case <-next.C:
			pull()
			next.Reset(m.remote().Interval)
		case <-m.pull:
			if deferred {
				continue // already on its way
			}
			if wait := last + m.opt.PullEvery - m.opt.Elapsed(); wait > 0 {
				m.opt.Log.Info("early pull deferred: one per "+m.opt.PullEvery.String()+" at most", "in", wait.Round(time.Second))
				deferred = true
				early.Reset(wait)
				continue
			}
			pull()
		case <-early.C:
			deferred = false
			pull()
		}
	}
}

// watchLoop watches a bundle on probation every Options.WatchEvery until
// ctx ends.
func (m *Manager) watchLoop(ctx context.Context) {
	watch := time.NewTicker(m.opt.WatchEvery)
	defer watch.Stop()
	for {
		select {
		case <-ctx.Done():
			return
		case <-watch.C:
			m.watch()
		}
	}
}

// fetch GETs the bundle (conditionally) and handles a new one.
func (m *Manager) fetch(ctx context.Context) {
	m.mu.Lock()
	url, etag := m.local.RemoteConfig.URL, m.st.ETag
	m.mu.Unlock()
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, url, nil)
	if err != nil {
		m.opt.Log.Error("remote configuration: bad URL", "err", err)
		return
	}
	if etag != "" {
		req.Header.Set("If-None-Match", etag)
	}
	resp, err := m.opt.Client.Do(req)
	if err != nil {
		m.opt.Log.Warn("remote configuration server unreachable; the configuration in force stays", "err", err)
		return
	}
	defer resp.Body.Close()
	switch resp.StatusCode {
	case http.StatusNotModified:
		return
	case http.StatusOK:
	default:
		m.opt.Log.Warn("remote configuration server answered an error; the configuration in force stays", "status", resp.Status)
		return
	}
	data, err := io.ReadAll(io.LimitReader(resp.Body, MaxBundleSize+1))
	if err != nil {
		m.opt.Log.Warn("remote configuration: reading the bundle failed", "err", err)
		return
	}
	m.handle(data, resp.Header.Get("ETag"))
}

// handle checks a fetched bundle and applies it if it is new and good.
func (m *Manager) handle(data []byte, etag string) {
	m.mu.Lock()
	defer m.mu.Unlock()
	now := m.opt.Now()
	man, site, err := Open(data, m.keys, m.local.Gateway.ID, now)
	// refuse records and reports a refusal; the configuration in force,
	// and its probation, stay as they are. The ETag is kept only when the
	// same bundle would be refused again, so that one refused for now (not
	// valid yet, cut short, another on probation, a full disk) is
	// downloaded again at the next pull.
	refuse := func(serial uint64, why string, forGood bool) {
		m.st.Refused = &Refusal{Serial: serial, Reason: why, At: now}
		if forGood {
			m.st.ETag = etag
		}
		m.saveLocked()
		m.opt.Log.Warn("bundle refused; the configuration in force stays", "serial", serial, "reason", why)
		m.gw.Report(m.st.Refused.report())
	}
	switch {
	case err != nil:
		// A download cut short or altered on the way may come whole next time.
		refuse(man.Serial, err.Error(), !errors.Is(err, ErrNotYet) && !errors.Is(err, ErrMalformed) && !errors.Is(err, ErrDigest))
		return
	case m.floorErr != nil:
		refuse(man.Serial, m.floorErr.Error(), false)
		return
	case man.Serial == m.st.Serial:
		m.st.ETag = etag // the bundle in force: nothing new
		m.saveLocked()
		return
	case slices.Contains(m.st.Reverted, man.Serial):
		refuse(man.Serial, fmt.Sprintf("serial %d was reverted on this gateway; publish a new serial", man.Serial), true)
		return
	case man.Serial < m.st.Serial:
		refuse(man.Serial, fmt.Sprintf("serial %d is not above the serial in force, %d", man.Serial, m.st.Serial), true)
		return
	case man.Serial <= m.floor:
		// state.json was lost (the local file runs), not the floor.
		refuse(man.Serial, fmt.Sprintf("serial %d is not above %d, the highest applied on this gateway", man.Serial, m.floor), true)
		return
	case m.st.Event == StateProbation:
		refuse(man.Serial, fmt.Sprintf("bundle %d is still on probation", m.st.Serial), false)
		return
	}
	c, err := Merge(m.local, site, man.Serial, m.opt.Profiles)
	if err != nil {
		refuse(man.Serial, err.Error(), true)
		return
	}
	base := m.gw.Vitals()
	m.opt.Step("write bundle")
	if err := m.s.putBundle(man.Serial, site); err != nil {
		refuse(man.Serial, "cannot keep it on disk: "+err.Error(), false)
		return
	}
	prev := m.st
	m.st.Serial, m.st.Event, m.st.Reason, m.st.At, m.st.Last, m.st.ETag = man.Serial, StateProbation, "", now, man.Serial, etag
	m.probStart, m.probFor = m.opt.Elapsed(), m.local.RemoteConfig.Probation
	m.st.ProbationUntil, m.st.Baseline, m.st.Required = now.Add(m.probFor), base, base.atLeast(m.st.Reached)
	m.opt.Step("record probation")
	if err := m.s.save(m.st); err != nil {
		m.st = prev
		refuse(man.Serial, "cannot record it: "+err.Error(), false)
		return
	}
	if man.Serial > m.floor {
		// After state.json, which names the bundle on probation: a kill
		// between the two leaves a probation that Startup reverts and
		// whose serial the next start takes as the floor.
		if err := m.s.saveFloor(man.Serial); err != nil {
			m.st = prev
			m.saveLocked()
			refuse(man.Serial, "cannot record its serial: "+err.Error(), false)
			return
		}
		m.floor = man.Serial
	}
	m.opt.Step("reload")
	if err := m.gw.Reload(c); err != nil {
		// Refused by the reload: the configuration in force never changed.
		m.st = prev
		m.st.Reverted = append(slices.Clone(prev.Reverted), man.Serial)
		refuse(man.Serial, "the gateway cannot run it: "+err.Error(), true)
		return
	}
	m.down, m.fewer, m.met, m.best = lasting{}, lasting{}, false, Vitals{}
	m.opt.Log.Info("bundle applied; on probation", "serial", man.Serial, "until", m.st.ProbationUntil, "baseline_upstream_up", base.UpstreamUp, "baseline_answering", base.Answering, "required", m.st.Required.String())
	m.reportLocked()
}

// watch checks the bundle on probation: reverted if it broke the gateway,
// or if at the end of its probation it never reached what the
// configuration before it reached; else confirmed then. Off probation it
// notes what the configuration in force reaches.
func (m *Manager) watch() {
	m.mu.Lock()
	defer m.mu.Unlock()
	el := m.opt.Elapsed()
	h := m.gw.Vitals()
	if m.st.Event != StateProbation {
		m.noteReachedLocked(el, h)
		return
	}
	if h.reaches(m.st.Required) {
		m.met = true
	}
	m.best = m.best.atLeast(h)
	down := m.down.hold(el, m.st.Baseline.UpstreamUp && !h.UpstreamUp)
	fewer := m.fewer.hold(el, h.Answering < m.st.Baseline.Answering-answeringDrop)
	switch {
	case down >= m.opt.Grace:
		m.revertLocked(el, fmt.Sprintf("no upstream reachable for %v, though one was before it", down.Round(time.Second)))
	case fewer >= m.opt.Grace:
		m.revertLocked(el, fmt.Sprintf("devices answering fell from %.0f%% to %.0f%%", 100*m.st.Baseline.Answering, 100*h.Answering))
	case el-m.probStart >= m.probFor && !m.met:
		// Confirmation needs positive evidence: at boot nothing is up
		// yet, and nothing is never worse than nothing.
		m.revertLocked(el, fmt.Sprintf("in its probation of %v it never reached what the configuration before it reached (%s); best: %s", m.probFor, m.st.Required, m.best))
	case el-m.probStart >= m.probFor:
		m.confirmLocked(el)
	}
}

// noteReachedLocked records in st.Reached what the configuration in force
// reaches: an upstream once up stays; the share of devices answering is
// the best of this run once the configuration has run a probation's
// length in it (a device gone for good stops being required), and until
// then no less than what state.json kept.
func (m *Manager) noteReachedLocked(el time.Duration, h Vitals) {
	m.seen = m.seen.atLeast(h)
	want := m.seen.atLeast(m.st.Reached)
	if el-m.inForce >= m.local.RemoteConfig.Probation {
		want.Answering = m.seen.Answering
	}
	if want != m.st.Reached {
		m.st.Reached = want
		m.saveLocked()
	}
}

func (m *Manager) confirmLocked(el time.Duration) {
	m.opt.Step("confirm")
	prevGood := m.st.KnownGood
	m.inForce, m.seen = el, Vitals{}
	m.st.Reached = m.best.atLeast(m.st.Required)
	m.st.KnownGood, m.st.Event, m.st.Reason, m.st.At, m.st.Last = m.st.Serial, StateApplied, "", m.opt.Now(), m.st.Serial
	// Whatever is published is downloaded afresh at the next pull and
	// checked against the configuration now known good.
	m.st.ProbationUntil, m.st.ETag = time.Time{}, ""
	m.saveLocked()
	m.s.prune(m.st.KnownGood)
	m.opt.Log.Info("bundle confirmed after its probation: it is the known-good configuration", "serial", m.st.Serial, "previous", prevGood)
	m.reportLocked()
}

func (m *Manager) revertLocked(el time.Duration, why string) {
	bad := m.st.Serial
	// The known-good configuration is back: what it reached stays
	// required until it has run a probation's length again.
	m.inForce, m.seen = el, Vitals{}
	m.opt.Step("revert")
	back, err := m.local, error(nil)
	if m.st.KnownGood != 0 {
		back, err = loadBundle(m.s, m.local, m.st.KnownGood, m.opt.Profiles)
	}
	if err == nil {
		err = m.gw.Reload(back)
	}
	if err != nil {
		m.opt.Log.Error("bundle broke the gateway, and the known-good configuration cannot be reloaded: restart the gateway (it starts from the known-good file)", "serial", bad, "err", err)
	}
	m.st.Reverted = append(m.st.Reverted, bad)
	m.st.Serial, m.st.Event, m.st.Reason, m.st.At, m.st.Last = m.st.KnownGood, StateReverted, why, m.opt.Now(), bad
	m.st.ProbationUntil, m.st.ETag = time.Time{}, "" // fetched again, it is refused out loud
	m.opt.Step("record revert")
	m.saveLocked()
	m.s.prune(m.st.KnownGood)
	m.opt.Log.Warn("bundle reverted: the known-good configuration is back", "serial", bad, "known_good", m.st.KnownGood, "reason", why)
	m.reportLocked()
}

func (m *Manager) saveLocked() {
	if m.floorErr != nil {
		// Left as it is, state.json still shows the floor is unknown at
		// the next start.
		return
	}
	if err := m.s.save(m.st); err != nil {
		m.opt.Log.Error("remote configuration state not saved", "err", err)
	}
}

// report reports what happened last: a refusal, or the configuration in
// force.
func (m *Manager) report() {
	m.mu.Lock()
	defer m.mu.Unlock()
	if f := m.st.Refused; f != nil && f.At.After(m.st.At) {
		m.gw.Report(f.report())
		return
	}
	m.reportLocked()
}

// reportLocked reports the configuration in force.
func (m *Manager) reportLocked() {
	r := Report{Serial: m.st.Last, State: m.st.Event, Reason: m.st.Reason, At: m.st.At}
	if r.State == "" {
		r.State, r.Serial = StateApplied, m.st.Serial
	}
	m.gw.Report(r)
}

func (f *Refusal) report() Report {
	return Report{Serial: f.Serial, State: StateRefused, Reason: f.Reason, At: f.At}
}
