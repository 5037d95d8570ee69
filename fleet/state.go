package fleet

import (
	"bytes"
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"slices"
	"strconv"
	"time"

	"fieldlink/internal/atomicfile"
)

// States reported. The first three are the configuration in force's;
// refused is a bundle's that was not applied, which never changes the
// configuration in force.
const (
	StateApplied   = "applied"   // a bundle confirmed after its probation (or the local file)
	StateProbation = "probation" // a bundle applied and watched
	StateReverted  = "reverted"  // a bundle undone: the known-good configuration is back
	StateRefused   = "refused"   // a bundle not applied: the configuration in force did not change
)

// Vitals are what probation watches: whether an upstream is up, and
// the share of devices answering.
type Vitals struct {
	// UpstreamUp: at least one upstream is connected.
	UpstreamUp bool
	// Answering is the share of devices whose last poll succeeded, 0..1.
	Answering float64
}

// atLeast is the better of h and o, each part apart.
func (h Vitals) atLeast(o Vitals) Vitals {
	return Vitals{UpstreamUp: h.UpstreamUp || o.UpstreamUp, Answering: max(h.Answering, o.Answering)}
}

// reaches reports whether h is as good as want: an upstream up if want
// has one, and no more than answeringDrop fewer devices answering.
func (h Vitals) reaches(want Vitals) bool {
	return (h.UpstreamUp || !want.UpstreamUp) && h.Answering >= want.Answering-answeringDrop-1e-9
}

func (h Vitals) String() string {
	up := "no upstream up"
	if h.UpstreamUp {
		up = "an upstream up"
	}
	return fmt.Sprintf("%s, %.0f%% of devices answering", up, 100*h.Answering)
}

// State is the remote configuration's record, kept beside the buffer in
// state.json. Each bundle's site file is kept as bundle-SERIAL.yaml, so
// that whatever step a crash stops, state.json names files that exist.
//
// It holds the configuration in force and, apart, the last refusal: a
// refused bundle never changes the configuration in force, its probation
// or what a revert goes back to. A bundle is on probation exactly when
// Serial differs from KnownGood.
type State struct {
	// Serial of the bundle in force: on probation, or confirmed; 0 is the
	// local site file.
	Serial uint64 `json:"serial"`
	// KnownGood is the last confirmed serial; 0 is the local site file.
	KnownGood uint64 `json:"known_good"`
	// Event is the last thing that happened to the configuration in force
	// (applied, probation or reverted), and why.
	Event  string    `json:"state"`
	Reason string    `json:"reason,omitempty"`
	At     time.Time `json:"at"`
	// Last is the serial the last event was about: for a revert, the
	// bundle reverted.
	Last uint64 `json:"last_serial,omitempty"`
	// ProbationUntil (a wall-clock time, for reports: the probation itself
	// is timed by the monotonic clock) and Baseline describe the bundle on
	// probation.
	ProbationUntil time.Time `json:"probation_until,omitzero"`
	Baseline       Vitals    `json:"baseline"`
	// Required is what the bundle on probation must reach at least once
	// to be confirmed: the better of Baseline and Reached when it was
	// applied. A bundle applied at boot, when nothing is up yet, must
	// still do what the configuration before it did.
	Required Vitals `json:"required,omitzero"`
	// Reached is the vitals the configuration in force reached: at its
	// confirmation, what its probation reached and no less than what was
	// required of it (so it does not erode bundle by bundle), then what
	// this gateway saw it reach while running. It survives restarts, so the positive
	// evidence a bundle is held to does not depend on when it was pulled.
	// An upstream once up stays required; the share of devices answering
	// follows what the configuration reached in the last run that lasted a
	// probation.
	Reached Vitals `json:"reached,omitzero"`
	// Reverted serials are never applied again.
	Reverted []uint64 `json:"reverted,omitempty"`
	// ETag of the last bundle fetched, for a conditional GET: kept for the
	// bundle in force and for one refused for good, never for one refused
	// for now, so that it is fetched again.
	ETag string `json:"etag,omitempty"`
	// Refused is the last bundle refused; nil if none was.
	Refused *Refusal `json:"refused,omitempty"`
}

// Refusal is a bundle refused: the serial its manifest gave (0 when it
// could not be read), why, and when.
type Refusal struct {
	Serial uint64    `json:"serial"`
	Reason string    `json:"reason"`
	At     time.Time `json:"at"`
}

// fromRefused reads a state.json in which a refusal replaced the event of
// the configuration in force ("state": "refused"), as gateways wrote
// before refusals were kept apart: the refusal goes to Refused, and a
// bundle that was on probation is on probation again (Startup reverts it).
func fromRefused(st State) State {
	st.Refused = &Refusal{Serial: st.Last, Reason: st.Reason, At: st.At}
	st.Event, st.Reason, st.Last = StateApplied, "", st.Serial
	if st.Serial != st.KnownGood || !st.ProbationUntil.IsZero() {
		st.Event = StateProbation
	}
	return st
}

// Report is what the gateway publishes about its configuration.
type Report struct {
	Serial uint64    `json:"serial"`
	State  string    `json:"state"`
	Reason string    `json:"reason,omitempty"`
	At     time.Time `json:"at"`
}

// store keeps State and the bundles' site files in a directory.
type store struct{ dir string }

// floorFile keeps the highest serial applied on this gateway apart from
// state.json, so that a corrupted state.json (which starts the gateway
// from the local file) cannot open the way to an older serial. It is
// written atomically and carries its own digest.
const floorFile = "serial-floor"

// floorRecord is floorFile's content.
type floorRecord struct {
	Highest uint64 `json:"highest"`
	SHA256  string `json:"sha256"` // of floorDigest(Highest)
}

func floorDigest(n uint64) string {
	sum := sha256.Sum256([]byte("fieldlink highest serial " + strconv.FormatUint(n, 10)))
	return hex.EncodeToString(sum[:])
}

// floor reads the highest serial applied: 0 without a file; an error when
// the file is there but unreadable or does not check.
func (s store) floor() (uint64, error) {
	path := filepath.Join(s.dir, floorFile)
	b, err := os.ReadFile(path)
	if errors.Is(err, os.ErrNotExist) {
		return 0, nil
	}
	if err != nil {
		return 0, err
	}
	var f floorRecord
	dec := json.NewDecoder(bytes.NewReader(b))
	dec.DisallowUnknownFields()
	if err := dec.Decode(&f); err != nil || f.SHA256 != floorDigest(f.Highest) {
		return 0, fmt.Errorf("%s: corrupted", path)
	}
	return f.Highest, nil
}

func (s store) saveFloor(n uint64) error {
	b, err := json.Marshal(floorRecord{Highest: n, SHA256: floorDigest(n)})
	if err != nil {
		return err
	}
	return writeAtomic(filepath.Join(s.dir, floorFile), append(b, '\n'))
}

// highest is the highest serial st says was applied (a refusal applied
// nothing).
func (st State) highest() uint64 {
	n := max(st.Serial, st.KnownGood, st.Last)
	for _, r := range st.Reverted {
		n = max(n, r)
	}
	return n
}

func (s store) bundlePath(serial uint64) string {
	return filepath.Join(s.dir, "bundle-"+strconv.FormatUint(serial, 10)+".yaml")
}

func (s store) load() (State, error) {
	var st State
	b, err := os.ReadFile(filepath.Join(s.dir, "state.json"))
	if errors.Is(err, os.ErrNotExist) {
		return st, nil
	}
	if err != nil {
		return st, err
	}
	if err := json.Unmarshal(b, &st); err != nil {
		return st, fmt.Errorf("%s: %w", filepath.Join(s.dir, "state.json"), err)
	}
	if st.Event == StateRefused {
		st = fromRefused(st)
	}
	return st, nil
}

func (s store) save(st State) error {
	b, err := json.MarshalIndent(st, "", "  ")
	if err != nil {
		return err
	}
	return writeAtomic(filepath.Join(s.dir, "state.json"), append(b, '\n'))
}

func (s store) putBundle(serial uint64, site []byte) error {
	return writeAtomic(s.bundlePath(serial), site)
}

func (s store) bundle(serial uint64) ([]byte, error) { return os.ReadFile(s.bundlePath(serial)) }

// prune removes the site files of serials other than keep.
func (s store) prune(keep ...uint64) {
	ents, _ := os.ReadDir(s.dir)
	for _, e := range ents {
		var n uint64
		if _, err := fmt.Sscanf(e.Name(), "bundle-%d.yaml", &n); err == nil && !slices.Contains(keep, n) {
			_ = os.Remove(filepath.Join(s.dir, e.Name()))
		}
	}
}

// writeAtomic replaces path with data, whole, in a directory it makes.
func writeAtomic(path string, data []byte) error {
	if err := os.MkdirAll(filepath.Dir(path), 0o750); err != nil {
		return err
	}
	return atomicfile.Write(path, data, 0o640)
}
