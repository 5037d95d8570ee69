package uplink

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"sync"
	"time"
)

// Kind is one kind of upstream (MQTT, Sparkplug B, HTTP): what the core
// asks of it, so that the pool, the names and the words need not know
// every kind. A kind registers with [Register] by its schemes and
// encodings.
type Kind interface {
	// Name is an upstream URL's name (see [UpstreamName]); its error never
	// shows a credential.
	Name(rawURL string) (string, error)
	// Open makes the upstream u of a pool configured by pc (its Logger set)
	// and does no I/O; the Conn's Run, if any, connects.
	Open(u UpstreamConfig, pc PoolConfig) (*Conn, error)
	// Explain says err in words (see [Explain]) when it is one of the
	// kind's own; ok is false for any other error.
	Explain(err error) (words string, ok bool)
}

// Conn is one upstream as its kind opened it: its sender and what the pool
// runs and calls for it. Nil funcs are things the kind has not.
type Conn struct {
	Sender
	// Run keeps the upstream connected until ctx ends.
	Run func(ctx context.Context)
	// Close releases what the upstream holds once its goroutines ended.
	Close func() error
	// ProbeResult takes each latency probe's outcome.
	ProbeResult func(err error)
	// Publish sends a message on a topic of the upstream's broker, for
	// [Pool.PublishAll]; Connected says whether it can now.
	Publish   func(ctx context.Context, topic string, payload []byte, retained bool) error
	Connected func() bool
	// NewProber probes with a publish on topic instead of TCP connects;
	// nil keeps TCP connects whatever [PoolConfig.ProbeTopic] says.
	NewProber func(topic string, interval, timeout time.Duration, report func(time.Duration, error)) *Prober
}

// kindEntry is one registration.
type kindEntry struct {
	schemes   []string
	encodings []Encoding
	kind      Kind
}

var kinds struct {
	sync.RWMutex
	list []kindEntry
}

// Register makes k the kind of the upstreams whose URL has one of schemes
// and whose encoding is one of encodings ("" counts as [EncodingJSON]). The
// first kind registered for a scheme also opens its upstreams of an
// encoding no kind claims, and says the error.
func Register(schemes []string, encodings []Encoding, k Kind) {
	kinds.Lock()
	defer kinds.Unlock()
	kinds.list = append(kinds.list, kindEntry{schemes, encodings, k})
}

// kindOf returns the kind of scheme and encoding.
func kindOf(scheme string, enc Encoding) (Kind, bool) {
	i := kindIndex(scheme, enc)
	if i < 0 {
		return nil, false
	}
	kinds.RLock()
	defer kinds.RUnlock()
	return kinds.list[i].kind, true
}

// kindIndex is the registration of the kind of scheme and encoding ("" is
// [EncodingJSON]), -1 if none: the one registered for both, else the
// first registered for the scheme.
func kindIndex(scheme string, enc Encoding) int {
	if enc == "" {
		enc = EncodingJSON
	}
	kinds.RLock()
	defer kinds.RUnlock()
	first := -1
	for i, e := range kinds.list {
		for _, s := range e.schemes {
			if s != scheme {
				continue
			}
			if first < 0 {
				first = i
			}
			for _, x := range e.encodings {
				if x == enc {
					return i
				}
			}
		}
	}
	return first
}

// schemeList is the registered schemes, "a, b or c", with suffix after each.
func schemeList(suffix string) string {
	kinds.RLock()
	defer kinds.RUnlock()
	var all []string
	for _, e := range kinds.list {
		for _, s := range e.schemes {
			all = append(all, s+suffix)
		}
	}
	if len(all) < 2 {
		return strings.Join(all, "")
	}
	return strings.Join(all[:len(all)-1], ", ") + " or " + all[len(all)-1]
}

// Open makes the upstream u by its kind, as a pool configured by pc would,
// without a pool: for a program that runs its own delivery loop. Run,
// Close and the probes are the caller's.
func Open(u UpstreamConfig, pc PoolConfig) (*Conn, error) {
	k, err := kindOfURL(u.URL, u.Encoding)
	if err != nil {
		return nil, err
	}
	return k.Open(u, pc)
}

// kindOfURL returns the kind of an upstream URL and encoding.
func kindOfURL(raw string, enc Encoding) (Kind, error) {
	scheme, _, ok := strings.Cut(raw, "://")
	if !ok {
		// Not echoed: without a scheme, what could be a password is not
		// where a parser would find it.
		return nil, errors.New("uplink: an upstream URL needs a scheme: " + schemeList("://"))
	}
	k, ok := kindOf(scheme, enc)
	if !ok {
		return nil, fmt.Errorf("uplink: scheme %q is not %s", scheme, schemeList(""))
	}
	return k, nil
}

// UpstreamName is an upstream URL's name: scheme, host and port for MQTT,
// the URL without credentials or query for HTTP. It is what logs and
// metrics show, and the upstream's identity in a [Pool] and the table.
func UpstreamName(raw string) (string, error) {
	k, err := kindOfURL(raw, "")
	if err != nil {
		return "", err
	}
	return k.Name(raw)
}
