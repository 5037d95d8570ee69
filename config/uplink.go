package config

import (
	"fmt"
	"net/url"
	"os"
	"slices"
	"strconv"
	"strings"
	"time"

	"fieldlink/buffer"
	"fieldlink/internal/yamlconf"
	"fieldlink/selector"
	"fieldlink/uplink"
	_ "fieldlink/uplink/kinds" // uplink.UpstreamName knows each kind's URLs, and each kind checks its settings
	"fieldlink/uplink/site"
)

// Buffer is where packets wait until an upstream acknowledged them.
type Buffer struct {
	// Path of the bbolt file; default /var/lib/fieldlink/buffer.db.
	Path string `yaml:"path"`
	// Durability: always (default: fsync before a packet counts as taken)
	// or interval (commit at least every sync_every; bounded loss window,
	// far fewer writes to the SD card).
	Durability buffer.Durability `yaml:"durability"`
	SyncEvery  time.Duration     `yaml:"sync_every"`
	// MaxBytes bounds the live packets; default 256MiB.
	MaxBytes ByteSize `yaml:"max_bytes"`
	// MaxAge drops packets older than this; 0 keeps them until delivered.
	MaxAge time.Duration `yaml:"max_age"`
	// WhenFull: drop_oldest (default) or reject_new.
	WhenFull buffer.WhenFull `yaml:"when_full"`
	// Order of replay after an outage: oldest_first (default) or
	// newest_first. Alarms always go first.
	Order buffer.Order `yaml:"order"`
}

// DefaultBufferPath is where the packaged gateway keeps its buffer.
const DefaultBufferPath = "/var/lib/fieldlink/buffer.db"

// ByteSize is a size in bytes, written as 1048576, 512KiB, 256MiB or 1GiB
// (KB, MB, GB are taken as powers of 1000).
type ByteSize int64

var sizeUnits = []struct {
	suffix string
	mult   int64
}{{"KiB", 1 << 10}, {"MiB", 1 << 20}, {"GiB", 1 << 30}, {"KB", 1e3}, {"MB", 1e6}, {"GB", 1e9}, {"B", 1}}

// UnmarshalText parses a size with an optional unit.
func (b *ByteSize) UnmarshalText(text []byte) error {
	s := strings.TrimSpace(string(text))
	mult := int64(1)
	for _, u := range sizeUnits {
		if strings.HasSuffix(s, u.suffix) {
			s, mult = strings.TrimSpace(strings.TrimSuffix(s, u.suffix)), u.mult
			break
		}
	}
	n, err := strconv.ParseFloat(s, 64)
	if err != nil || n < 0 {
		return fmt.Errorf("expected a size such as 256MiB or 1GiB, got %q", text)
	}
	*b = ByteSize(n * float64(mult))
	return nil
}

// Uplink is where packets go.
type Uplink struct {
	// Selector is the strategy that picks an upstream for each delivery;
	// default DefaultSelector.
	Selector string `yaml:"selector"`
	Probe    Probe  `yaml:"probe"`
	// Window is how many publishes may await an ack per upstream; default 64.
	Window int `yaml:"window"`
	// Batch is how many packets one HTTP POST carries at most, as a JSON
	// array (one packet alone is sent as it is); default 50.
	Batch int `yaml:"batch"`
	// StatusTopic is where every MQTT upstream publishes the gateway's
	// retained "online" (after each connect) and "offline" (at a clean stop,
	// and as the last will when the link breaks): default
	// uplink.DefaultStatusTopic, "fieldlink/{site}/{gateway}/status";
	// {site} and {gateway} are the only variables; "off" publishes none.
	StatusTopic string `yaml:"status_topic"`
	// ProbeTopic is where the latency probes of MQTT upstreams publish, a
	// QoS 1 message, empty and not retained, timed to its PUBACK: default
	// uplink.DefaultProbeTopic, "fieldlink-probe/{site}/{gateway}"; {site}
	// and {gateway} are the only variables; "off" probes with TCP
	// connects. Sparkplug B upstreams are probed with TCP connects.
	ProbeTopic string     `yaml:"probe_topic"`
	Upstreams  []Upstream `yaml:"upstreams"`
	Registry   *Registry  `yaml:"registry"`
	// DRF parameterises the drf selector (gateway delphi writes it).
	DRF *DRF `yaml:"drf"`
}

// DRF holds § 000's Delphi results: the servers' resources (TR) and a
// task's demands (N) per factor, and how often to re-score.
type DRF struct {
	TR     DRFFactors    `yaml:"tr"`
	N      DRFFactors    `yaml:"n"`
	Period time.Duration `yaml:"period"` // default 5m, the paper's
	// ResponseTime: lifetime (default, as Ribbon keeps it) or window.
	ResponseTime string `yaml:"response_time"`
}

// DRFFactors are the five Ribbon factors.
type DRFFactors struct {
	Failures            float64 `yaml:"failures"`
	InFlight            float64 `yaml:"in_flight"`
	ConsecutiveFailures float64 `yaml:"consecutive_failures"`
	ResponseTimeStdDev  float64 `yaml:"rt_stddev"`
	Latency             float64 `yaml:"latency"`
}

// Probe sets the latency probes.
type Probe struct {
	Interval time.Duration `yaml:"interval"` // default 10s
	Timeout  time.Duration `yaml:"timeout"`  // default 2s
}

// Upstream is one MQTT broker or HTTP ingest endpoint.
type Upstream struct {
	// URL: mqtt://host:1883, mqtts://host:8883, http://… or https://…
	URL string `yaml:"url,required"`
	// Topic template for MQTT; {site}, {gateway}, {data_type}, {device}.
	Topic string `yaml:"topic"`
	// QoS for MQTT: 1 (default) or 0.
	QoS    *int `yaml:"qos"`
	Weight int  `yaml:"weight"` // for weighted strategies; default 1
	TLS    *TLS `yaml:"tls"`
	// Username and the password's source: a file (first line) or an
	// environment variable. Passwords are never logged.
	Username     string `yaml:"username"`
	PasswordFile string `yaml:"password_file"`
	PasswordEnv  string `yaml:"password_env"`
	// Encoding of an HTTP upstream: json (default) or influx_line (InfluxDB
	// line protocol; the URL is InfluxDB's write endpoint, docs/influx.md).
	Encoding uplink.Encoding `yaml:"encoding"`
	// TokenFile's first line is sent as a bearer token (InfluxDB's Token
	// with influx_line); HeadersFile holds custom headers, one "Name: value"
	// a line. HTTP upstreams only; their contents are never logged.
	TokenFile   string `yaml:"token_file"`
	HeadersFile string `yaml:"headers_file"`
	// ProbeURL (health in the site file) is an HTTP URL probed for latency
	// instead of a TCP connect.
	ProbeURL string      `yaml:"health"`
	Load     *LoadSource `yaml:"load"`
	// Sparkplug names the node of an MQTT upstream with encoding
	// sparkplug_b.
	Sparkplug *Sparkplug `yaml:"sparkplug"`
}

// TLS for an upstream. The server is verified against CA (or the system
// roots) by default; Cert and Key give a client certificate.
type TLS struct {
	CA                 string `yaml:"ca"`
	Cert               string `yaml:"cert"`
	Key                string `yaml:"key"`
	InsecureSkipVerify bool   `yaml:"insecure_skip_verify"`
}

// LoadSource is where an upstream publishes its load report.
type LoadSource struct {
	URL      string        `yaml:"url"`   // polled HTTP JSON endpoint
	Topic    string        `yaml:"topic"` // or a retained MQTT topic on the same broker
	Interval time.Duration `yaml:"interval"`
}

// Registry returns the upstream list.
type Registry struct {
	URL     string        `yaml:"url,required"`
	Refresh time.Duration `yaml:"refresh"` // default 5m
}

// DefaultSelector is the selector lab's verdict (docs/selector-lab.md):
// drf_cswlc, the gateway's own DRF/CS-WLC selector, loses success rate in
// no scenario and has the best p99 over all of them, and needs nothing from
// the servers.
const DefaultSelector = "drf_cswlc"

// SelectorNames are the strategies a site file may name: the selector's.
var SelectorNames = selector.Names()

// validateBuffer checks the buffer section and fills in its defaults: the
// path's here, the rest the buffer package's own.
func (c *Config) validateBuffer(doc *yamlconf.Doc) {
	b := &c.Buffer
	if b.Path == "" {
		b.Path = DefaultBufferPath
	} else if !strings.HasPrefix(b.Path, "/") {
		if i := strings.LastIndexByte(c.File, '/'); i >= 0 {
			b.Path = c.File[:i+1] + b.Path
		}
	}
	if b.SyncEvery == 0 {
		b.SyncEvery = buffer.DefaultSyncEvery
	} else if b.Durability != buffer.Interval {
		doc.Errorf("buffer.sync_every", "applies only with durability: interval")
	}
	if b.SyncEvery < time.Millisecond || b.SyncEvery > time.Minute {
		doc.Errorf("buffer.sync_every", "must be between 1ms and 1m, got %v", b.SyncEvery)
	}
	if b.MaxBytes == 0 {
		b.MaxBytes = buffer.DefaultMaxBytes
	} else if b.MaxBytes < 64<<10 {
		doc.Errorf("buffer.max_bytes", "must be at least 64KiB, got %d bytes", b.MaxBytes)
	}
	if b.MaxAge < 0 {
		doc.Errorf("buffer.max_age", "must be 0 (keep packets until delivered) or positive, got %v", b.MaxAge)
	}
}

// validateUplink checks the uplink section, when there is one, and fills in
// its defaults: the selector's here, the rest the uplink package's own.
func (c *Config) validateUplink(doc *yamlconf.Doc) {
	u := c.Uplink
	if u == nil {
		return
	}
	if u.Selector == "" {
		u.Selector = DefaultSelector
	}
	if !slices.Contains(SelectorNames, u.Selector) {
		doc.Errorf("uplink.selector", "unknown selector %q (valid: %s)", u.Selector, strings.Join(SelectorNames, ", "))
	}
	if d := u.DRF; d != nil {
		if u.Selector != "drf" {
			doc.Errorf("uplink.drf", "drf settings apply only with selector: drf")
		}
		if d.ResponseTime != "" && d.ResponseTime != "lifetime" && d.ResponseTime != "window" {
			doc.Errorf("uplink.drf.response_time", "must be lifetime or window, got %q", d.ResponseTime)
		}
		if d.Period < 0 {
			doc.Errorf("uplink.drf.period", "must be 0 (the default, 5m) or positive, got %v", d.Period)
		}
		for _, f := range []struct {
			name string
			v    DRFFactors
		}{{"tr", d.TR}, {"n", d.N}} {
			for _, x := range []float64{f.v.Failures, f.v.InFlight, f.v.ConsecutiveFailures, f.v.ResponseTimeStdDev, f.v.Latency} {
				if x < 0 {
					doc.Errorf("uplink.drf."+f.name, "amounts must be 0 or positive, got %v", x)
					break
				}
			}
		}
	}
	if u.Probe.Interval == 0 {
		u.Probe.Interval = uplink.DefaultProbeInterval
	}
	if u.Probe.Timeout == 0 {
		u.Probe.Timeout = uplink.DefaultProbeTimeout
	}
	if u.Probe.Interval < 100*time.Millisecond {
		doc.Errorf("uplink.probe.interval", "must be at least 100ms, got %v", u.Probe.Interval)
	}
	if u.Probe.Timeout <= 0 || u.Probe.Timeout > u.Probe.Interval {
		doc.Errorf("uplink.probe.timeout", "must be positive and at most the interval (%v), got %v", u.Probe.Interval, u.Probe.Timeout)
	}
	if u.Window == 0 {
		u.Window = uplink.DefaultWindow
	}
	if u.Window < 1 || u.Window > 65535 {
		doc.Errorf("uplink.window", "must be 1..65535, got %d", u.Window)
	}
	if u.Batch == 0 {
		u.Batch = uplink.DefaultBatch
	}
	if u.Batch < 1 || u.Batch > 10000 {
		doc.Errorf("uplink.batch", "must be 1..10000, got %d", u.Batch)
	}
	if err := site.CheckTopic(u.StatusTopic); err != nil {
		doc.Errorf("uplink.status_topic", "%v (a topic with {site} and {gateway} only, or off)", err)
	}
	if u.StatusTopic == "" {
		u.StatusTopic = uplink.DefaultStatusTopic
	}
	if err := site.CheckTopic(u.ProbeTopic); err != nil {
		doc.Errorf("uplink.probe_topic", "%v (a topic with {site} and {gateway} only, or off)", err)
	}
	if u.ProbeTopic == "" {
		u.ProbeTopic = uplink.DefaultProbeTopic
	}
	if len(u.Upstreams) == 0 && u.Registry == nil {
		doc.Errorf("uplink.upstreams", "give at least one upstream, or a registry")
	}
	if len(u.Upstreams) > selector.MaxUpstreams {
		doc.Errorf("uplink.upstreams", "at most %d upstreams, got %d", selector.MaxUpstreams, len(u.Upstreams))
	}
	seen, names := map[string]int{}, map[string]int{}
	for i := range u.Upstreams {
		up := &u.Upstreams[i]
		f := fmt.Sprintf("uplink.upstreams[%d]", i)
		scheme, err := UpstreamScheme(up.URL)
		if err != nil && up.URL != "" {
			doc.Errorf(f+".url", "%v", err)
		}
		if j, dup := seen[up.URL]; dup && up.URL != "" {
			doc.Errorf(f+".url", "same URL as uplink.upstreams[%d] (list each upstream once)", j)
		}
		seen[up.URL] = i
		if name, err := uplink.UpstreamName(up.URL); err == nil {
			if j, dup := names[name]; dup && up.URL != u.Upstreams[j].URL {
				doc.Errorf(f+".url", "is uplink.upstreams[%d] again: the gateway knows an upstream by its URL without credentials or query, %s (give each upstream its own host or path)", j, name)
			}
			names[name] = i
		}
		if up.Weight == 0 {
			up.Weight = 1
		}
		if up.Weight < 0 || up.Weight > 1000 {
			doc.Errorf(f+".weight", "must be 1..1000, got %d", up.Weight)
		}
		if up.QoS == nil {
			q := 1
			up.QoS = &q
		} else if *up.QoS != 0 && *up.QoS != 1 {
			doc.Errorf(f+".qos", "must be 0 or 1 (QoS 1 is what makes a delivery acknowledged), got %d", *up.QoS)
		}
		if up.PasswordFile != "" && up.PasswordEnv != "" {
			doc.Errorf(f+".password_env", "give password_file or password_env, not both")
		}
		if up.PasswordFile != "" {
			// Opened, never read here: the message names the file only.
			if err := readable(c.rel(up.PasswordFile)); err != nil {
				doc.Errorf(f+".password_file", "%v (give a file the gateway can read, whose first line is the password)", err)
			}
		}
		c.checkUpstream(doc, f, up, err == nil)
		c.validateSparkplug(doc, f, up)
		if up.PasswordEnv != "" {
			if _, ok := os.LookupEnv(up.PasswordEnv); !ok {
				doc.Errorf(f+".password_env", "environment variable %s is not set (set it in the gateway's environment, or use password_file)", up.PasswordEnv)
			}
		}
		if t := up.TLS; t != nil {
			if scheme == "mqtt" || scheme == "http" {
				doc.Errorf(f+".tls", "tls needs an mqtts:// or https:// URL")
			}
			if (t.Cert == "") != (t.Key == "") {
				doc.Errorf(f+".tls.key", "a client certificate needs both cert and key")
			}
			for _, p := range []struct{ name, path string }{{"ca", t.CA}, {"cert", t.Cert}, {"key", t.Key}} {
				if p.path == "" {
					continue
				}
				if err := readable(c.rel(p.path)); err != nil {
					doc.Errorf(f+".tls."+p.name, "%v (give a PEM file the gateway can read)", err)
				}
			}
			if t.InsecureSkipVerify {
				line, _ := doc.Line(f + ".tls.insecure_skip_verify")
				c.Warnings = append(c.Warnings, fmt.Sprintf("%s:%d: %s.tls.insecure_skip_verify: the server's certificate will NOT be verified; anyone on the path can read and forge packets", c.File, line, f))
			}
		}
		if up.ProbeURL != "" {
			if hs, err := UpstreamScheme(up.ProbeURL); err != nil || (hs != "http" && hs != "https") {
				doc.Errorf(f+".health", "must be an http:// or https:// URL")
			}
		}
		if l := up.Load; l != nil {
			if (l.URL == "") == (l.Topic == "") {
				doc.Errorf(f+".load", "give url (an HTTP JSON endpoint) or topic (a retained MQTT topic), one of them")
			}
			if l.Interval == 0 {
				l.Interval = u.Probe.Interval
			}
		}
	}
	if r := u.Registry; r != nil {
		if s, err := UpstreamScheme(r.URL); err != nil || (s != "http" && s != "https") {
			doc.Errorf("uplink.registry.url", "must be an http:// or https:// URL")
		}
		if r.Refresh == 0 {
			r.Refresh = 5 * time.Minute
		}
		if r.Refresh < time.Second {
			doc.Errorf("uplink.registry.refresh", "must be at least 1s, got %v", r.Refresh)
		}
	}
}

// UpstreamScheme checks an upstream URL and returns its scheme.
func UpstreamScheme(raw string) (string, error) {
	u, err := url.Parse(raw)
	if err != nil {
		// The URL may hold a password: do not repeat it.
		return "", fmt.Errorf("not a valid URL (such as mqtts://host:8883 or https://host/api/packets)")
	}
	switch u.Scheme {
	case "mqtt", "mqtts", "http", "https":
	default:
		return "", fmt.Errorf("unknown scheme %q in %q (valid: mqtt, mqtts, http, https)", u.Scheme, u.Redacted())
	}
	if u.Host == "" {
		return "", fmt.Errorf("no host in %q (such as mqtts://host:8883 or https://host/api/packets)", u.Redacted())
	}
	if u.User != nil {
		return "", fmt.Errorf("put credentials in username and password_file, not in the URL")
	}
	return u.Scheme, nil
}

// readable reports why the file at path cannot be opened for reading, or
// whether it is a directory; nil when it can be read.
func readable(path string) error {
	f, err := os.Open(path)
	if err != nil {
		return err
	}
	defer f.Close()
	if st, err := f.Stat(); err == nil && st.IsDir() {
		return fmt.Errorf("%s is a directory", path)
	}
	return nil
}

// rel resolves a path relative to the site file's directory.
func (c *Config) rel(p string) string {
	if p == "" || strings.HasPrefix(p, "/") {
		return p
	}
	if i := strings.LastIndexByte(c.File, '/'); i >= 0 {
		return c.File[:i+1] + p
	}
	return p
}

// Rel resolves a path of the site file (password_file, tls files) relative
// to the site file's directory.
func (c *Config) Rel(p string) string { return c.rel(p) }

// Secret reads a secret's file of the site file (password_file,
// token_file), relative to the site file's directory: its first line,
// without the line end.
func (c *Config) Secret(p string) (string, error) {
	b, err := os.ReadFile(c.rel(p))
	if err != nil {
		return "", err
	}
	line, _, _ := strings.Cut(string(b), "\n")
	return strings.TrimRight(line, "\r"), nil
}
