package uplink

import (
	"bytes"
	"context"
	"crypto/tls"
	"encoding/json"
	"errors"
	"fmt"
	"log/slog"
	"math"
	"net/http"
	"net/url"
	"slices"
	"strings"
	"sync"
	"time"

	"fieldlink/uplink/internal/httpc"

	"fieldlink/selector"
)

// Defaults and bounds of the registry client.
const (
	defaultRegistryInterval = time.Minute
	defaultRegistryTimeout  = 10 * time.Second

	// registryMaxBytes bounds a registry answer.
	registryMaxBytes = 1 << 20
)

// RegistryUpstream is one upstream in a registry's list.
type RegistryUpstream struct {
	// URL is the upstream: mqtt://, mqtts://, http:// or https://, with a
	// host. It may hold credentials: never log it as it is.
	URL string `json:"url"`
	// Weight is ≥ 0; 1 when the registry gives none. What a weight means
	// (and a weight of 0, typically "drain") is the selector's business.
	Weight float64 `json:"weight"`
}

// parseRegistry reads a registry's answer, a JSON object whose "upstreams"
// array lists the upstreams, each with its "url" and an optional "weight":
//
//	{"upstreams":[
//	  {"url":"mqtts://ingest-1.example.net:8883","weight":2},
//	  {"url":"https://ingest-2.example.net/api/packets"}
//	]}
//
// The rules, all checked, so that a broken registry cannot hand the gateway
// an unusable list:
//
//   - "upstreams" is required and holds 1 to [selector.MaxUpstreams]
//     entries: an empty list is an error, not an instruction to stop
//     delivering, and a longer list is refused whole (the gateway cannot
//     take it, and picking which to drop is not its call).
//   - "url" is required; its scheme is mqtt, mqtts, http or https; it has a
//     host and, if any, a port 1..65535 (see [ProbeTarget]); no two entries
//     have the same URL.
//   - "weight" is optional (default 1), a number ≥ 0; null is as if absent.
//   - Keys match exactly (case-sensitive). Unknown keys, at the top and in
//     the entries, are ignored, so a registry may add its own (ids, zones).
//   - Anything else (not JSON, wrong types, trailing data) is an error.
//
// Errors name the entry and show URLs without credentials or query.
func parseRegistry(data []byte) ([]RegistryUpstream, error) {
	var top map[string]json.RawMessage
	if err := registryDecodeObject(data, &top); err != nil {
		return nil, fmt.Errorf("uplink: registry: %w", err)
	}
	raw, ok := top["upstreams"]
	if !ok || string(raw) == "null" {
		return nil, errors.New(`uplink: registry: no "upstreams"`)
	}
	var entries []json.RawMessage
	if err := json.Unmarshal(raw, &entries); err != nil || entries == nil {
		return nil, errors.New(`uplink: registry: "upstreams" is not an array`)
	}
	if len(entries) == 0 {
		return nil, errors.New(`uplink: registry: "upstreams" is empty`)
	}
	if err := registryCheckLen(len(entries)); err != nil {
		return nil, err
	}
	list := make([]RegistryUpstream, 0, len(entries))
	for i, e := range entries {
		up, err := registryParseEntry(e)
		if err != nil {
			return nil, fmt.Errorf("uplink: registry: upstreams[%d]: %w", i, err)
		}
		list = append(list, up)
	}
	if err := registryCheckList(list); err != nil {
		return nil, err
	}
	return list, nil
}

func registryParseEntry(data json.RawMessage) (RegistryUpstream, error) {
	var fields map[string]json.RawMessage
	if err := json.Unmarshal(data, &fields); err != nil || fields == nil {
		return RegistryUpstream{}, errors.New("not an object")
	}
	up := RegistryUpstream{Weight: 1}
	raw, ok := fields["url"]
	if !ok || string(raw) == "null" {
		return up, errors.New(`no "url"`)
	}
	if err := json.Unmarshal(raw, &up.URL); err != nil {
		return up, errors.New(`"url" is not a string`)
	}
	if raw, ok := fields["weight"]; ok && string(raw) != "null" {
		if err := json.Unmarshal(raw, &up.Weight); err != nil {
			return up, errors.New(`"weight" is not a number`)
		}
	}
	return up, registryCheck(up)
}

// registryCheck applies the per-entry rules of parseRegistry.
func registryCheck(up RegistryUpstream) error {
	if up.URL == "" {
		return errors.New(`empty "url"`)
	}
	if _, err := probeTargetOf(up.URL); err != nil {
		return fmt.Errorf("url: %w", err)
	}
	if math.IsNaN(up.Weight) || math.IsInf(up.Weight, 0) || up.Weight < 0 {
		return fmt.Errorf("weight %v: want a number ≥ 0", up.Weight)
	}
	return nil
}

// registryCheckLen refuses a list longer than a gateway's table takes.
func registryCheckLen(n int) error {
	if n > selector.MaxUpstreams {
		return fmt.Errorf("uplink: registry: the registry answered %d upstreams, more than the %d a gateway takes", n, selector.MaxUpstreams)
	}
	return nil
}

// registryCheckList applies the rules to a whole list.
func registryCheckList(list []RegistryUpstream) error {
	if len(list) == 0 {
		return errors.New("uplink: registry: empty upstream list")
	}
	if err := registryCheckLen(len(list)); err != nil {
		return err
	}
	seen := make(map[string]int, len(list))
	for i, up := range list {
		if err := registryCheck(up); err != nil {
			return fmt.Errorf("uplink: registry: upstreams[%d]: %w", i, err)
		}
		if j, dup := seen[up.URL]; dup {
			return fmt.Errorf("uplink: registry: upstreams[%d] repeats upstreams[%d] (%s)", i, j, registryShowURL(up.URL))
		}
		seen[up.URL] = i
	}
	return nil
}

// RegistryConfig configures a [Registry]. Only URL is required.
type RegistryConfig struct {
	// URL is the registry's http(s) URL; credentials in it are sent as
	// basic auth and never logged.
	URL string
	// Interval between refreshes, jittered by ±10%; 0 means
	// a minute.
	Interval time.Duration
	// Timeout bounds a refresh whose ctx has no deadline; 0 means
	// 10 s.
	Timeout time.Duration
	// TLS for https (nil: system roots; verification stays on).
	TLS *tls.Config
	// Header is sent with every request (e.g. Authorization); never logged.
	Header http.Header
	// Logger gets a Warn per failed refresh and an Info per change; nil
	// discards.
	Logger *slog.Logger
	// OnChange, if set, receives a copy of the new list after every refresh
	// that changed it (the same URLs with the same weights in any order is no
	// change). It is called from the refreshing goroutine, one call at a
	// time, after the list, its time and [Registry.Raw] are updated: it is
	// the place to persist Raw. Seed does not call it.
	OnChange func([]RegistryUpstream)
}

// Registry keeps the upstream list that a registry serves (the role of the
// Eureka/ZooKeeper registry of docs/algorithms.md § 001: consumers cache the providers and
// keep calling them when the registry is down). The list in use is the last
// good one: a refresh that fails — registry down, an error status, a body
// that is not a valid list — changes nothing, and is logged by
// [Registry.Run].
//
// On start, [Registry.Seed] puts back the list persisted from the last run,
// so that a gateway restarted without network still knows its upstreams.
// Refreshes send If-None-Match when the registry gave an ETag; a 304 keeps the
// list and counts as a successful fetch.
//
// A Registry is safe for concurrent use; refreshes run one at a time.
type Registry struct {
	url      string
	name     string
	interval time.Duration
	timeout  time.Duration
	header   http.Header
	log      *slog.Logger
	onChange func([]RegistryUpstream)

	transport *http.Transport
	client    *http.Client

	refreshMu sync.Mutex // one refresh at a time, so OnChange calls are ordered

	mu      sync.Mutex
	list    []RegistryUpstream
	raw     []byte
	fetched time.Time
	etag    string
}

// NewRegistry checks cfg and returns a registry client with an empty list.
// It does no I/O.
func NewRegistry(cfg RegistryConfig) (*Registry, error) {
	u, err := httpc.ParseURL(cfg.URL)
	if err != nil {
		return nil, fmt.Errorf("uplink: registry: %w", err)
	}
	if cfg.Interval < 0 || cfg.Timeout < 0 {
		return nil, fmt.Errorf("uplink: registry %s: negative interval or timeout", httpc.RedactURL(u))
	}
	r := &Registry{
		name:     httpc.RedactURL(u),
		interval: cfg.Interval,
		timeout:  cfg.Timeout,
		header:   cfg.Header,
		log:      cfg.Logger,
		onChange: cfg.OnChange,
	}
	if r.interval == 0 {
		r.interval = defaultRegistryInterval
	}
	if r.timeout == 0 {
		r.timeout = defaultRegistryTimeout
	}
	if r.log == nil {
		r.log = slog.New(slog.DiscardHandler)
	}
	r.header = httpc.BasicAuthFromURL(u, r.header)
	r.url = u.String()
	r.transport = httpc.NewTransport(cfg.TLS)
	r.transport.MaxIdleConns = 1
	r.transport.MaxIdleConnsPerHost = 1
	r.client = httpc.NewClient(r.transport)
	return r, nil
}

// Name returns the registry's URL without credentials or query.
func (r *Registry) Name() string { return r.name }

// Seed starts the registry from a list kept from an earlier run (the
// persisted [Registry.Raw], as [LoadRegistryList] reads it back). The list
// is checked as a fetched one is. Seed changes nothing once a fetch has succeeded:
// the fetched list is newer. After Seed the list is in use with a zero fetch
// time, and [Registry.Raw] returns its JSON encoding.
func (r *Registry) Seed(list []RegistryUpstream) error {
	if err := registryCheckList(list); err != nil {
		return err
	}
	raw, err := json.Marshal(struct {
		Upstreams []RegistryUpstream `json:"upstreams"`
	}{list})
	if err != nil {
		return fmt.Errorf("uplink: registry: %w", err)
	}
	r.mu.Lock()
	defer r.mu.Unlock()
	if !r.fetched.IsZero() {
		return nil
	}
	r.list = slices.Clone(list)
	r.raw = raw
	return nil
}

// upstreams returns a copy of the list in use and when it was last fetched
// (or confirmed by a 304); the time is zero when the list only comes from
// [Registry.Seed], and the list is nil when there is none yet.
func (r *Registry) upstreams() ([]RegistryUpstream, time.Time) {
	r.mu.Lock()
	defer r.mu.Unlock()
	return slices.Clone(r.list), r.fetched
}

// Raw returns a copy of the registry's last good answer, byte for byte (or
// the seeded list's JSON), for persistence; nil if there is none.
func (r *Registry) Raw() []byte {
	r.mu.Lock()
	defer r.mu.Unlock()
	return bytes.Clone(r.raw)
}

// refresh fetches the list once. On success the list, its time and Raw are
// updated, and OnChange is called if the list changed. On failure nothing
// changes and the error says why. When ctx has no deadline, the config's
// Timeout applies.
func (r *Registry) refresh(ctx context.Context) error {
	r.refreshMu.Lock()
	defer r.refreshMu.Unlock()
	if _, ok := ctx.Deadline(); !ok {
		var cancel context.CancelFunc
		ctx, cancel = context.WithTimeout(ctx, r.timeout)
		defer cancel()
	}
	header := r.header
	r.mu.Lock()
	if r.etag != "" && r.list != nil {
		header = header.Clone()
		header.Set("If-None-Match", r.etag)
	}
	r.mu.Unlock()

	resp, body, err := httpc.Get(ctx, r.client, r.url, r.name, header, registryMaxBytes, http.StatusNotModified)
	if err != nil {
		return err // it names the registry
	}
	now := time.Now()
	if resp.StatusCode == http.StatusNotModified {
		r.mu.Lock()
		if r.list == nil { // cannot happen: If-None-Match is sent only with a list
			r.mu.Unlock()
			return fmt.Errorf("uplink: registry %s: 304 Not Modified, but no list was fetched", r.name)
		}
		r.fetched = now
		r.mu.Unlock()
		return nil
	}
	list, err := parseRegistry(body)
	if err != nil {
		return fmt.Errorf("%w (from %s; keeping the last good list)", err, r.name)
	}
	r.mu.Lock()
	changed := !registrySame(r.list, list)
	r.list = list
	r.raw = body
	r.fetched = now
	r.etag = resp.Header.Get("ETag")
	r.mu.Unlock()
	if changed {
		r.log.Info("uplink: registry: upstream list changed", "registry", r.name, "upstreams", len(list))
		if r.onChange != nil {
			r.onChange(slices.Clone(list))
		}
	}
	return nil
}

// Run refreshes at once, then every interval (±10%) until ctx ends, logging
// failures; the last good list stays in use throughout. It returns promptly
// when ctx ends.
func (r *Registry) Run(ctx context.Context) {
	defer r.transport.CloseIdleConnections()
	probeEvery(ctx, r.interval, func(ctx context.Context) {
		if err := r.refresh(ctx); err != nil && ctx.Err() == nil {
			r.log.Warn("uplink: registry refresh failed", "registry", r.name, "err", err)
		}
	})
}

// registrySame reports whether a and b hold the same URLs with the same
// weights, in any order.
func registrySame(a, b []RegistryUpstream) bool {
	if len(a) != len(b) || (a == nil) != (b == nil) {
		return false
	}
	cmp := func(x, y RegistryUpstream) int { return strings.Compare(x.URL, y.URL) }
	a, b = slices.Clone(a), slices.Clone(b)
	slices.SortFunc(a, cmp)
	slices.SortFunc(b, cmp)
	return slices.Equal(a, b)
}

// registryShowURL renders an upstream URL for an error: without credentials
// or query, and only a bounded prefix of something that does not parse.
func registryShowURL(s string) string {
	if u, err := url.Parse(s); err == nil {
		return httpc.RedactURL(u)
	}
	if len(s) > 32 {
		s = s[:32] + "..."
	}
	return fmt.Sprintf("%q", s)
}

// registryDecodeObject decodes data, which must be exactly one JSON object,
// into v.
func registryDecodeObject(data []byte, v *map[string]json.RawMessage) error {
	data = bytes.TrimSpace(data)
	if len(data) == 0 || data[0] != '{' {
		return errors.New("not a JSON object")
	}
	if err := json.Unmarshal(data, v); err != nil {
		return fmt.Errorf("bad JSON: %w", err)
	}
	return nil
}
