package config

import (
	"errors"
	"net"
	"path/filepath"
	"strconv"

	"fieldlink/internal/yamlconf"
	"fieldlink/metrics"
)

// DefaultMetricsListen is metrics.listen's default: loopback only.
const DefaultMetricsListen = metrics.DefaultListen

// Metrics is the listener of gateway run: Prometheus metrics, health and
// readiness, and the status page.
type Metrics struct {
	// Listen is host:port; default 127.0.0.1:9273. "off" disables it.
	Listen string `yaml:"listen"`
	// AllowRemote lets Listen be a non-loopback address. Clients that are
	// not on loopback must then present the token of TokenFile to see the
	// status page.
	AllowRemote bool `yaml:"allow_remote"`
	// ScrapeToken makes /metrics take the token too; by default it stays
	// open, as Prometheus servers expect.
	ScrapeToken bool `yaml:"scrape_token"`
	// TokenFile holds the status page's token, written at the first start
	// with allow_remote (mode 0600); relative to the site file. Default:
	// status-token in the buffer file's directory.
	TokenFile string `yaml:"token_file"`
	// Readings adds each point's latest good reading to /metrics
	// (fieldlink_reading, by device and point), for sites that scrape
	// their values with Prometheus; default off.
	Readings bool `yaml:"readings"`
}

// DefaultTokenFile is the status token's file name beside the buffer file.
const DefaultTokenFile = "status-token"

// validateMetrics checks metrics.listen as far as it can without binding:
// a host:port, and a loopback address unless allow_remote is set (host
// names are checked by the address they bind, when the gateway starts).
func (c *Config) validateMetrics(doc *yamlconf.Doc) {
	m := c.Metrics
	if m.Listen == "off" {
		return
	}
	host, port, err := net.SplitHostPort(m.Listen)
	if err != nil {
		doc.Errorf("metrics.listen", "%q is not host:port (valid: host:port such as 127.0.0.1:9273, or off)", m.Listen)
		return
	}
	if p, err := strconv.Atoi(port); err != nil || p < 0 || p > 65535 {
		doc.Errorf("metrics.listen", "port %q must be a number from 0 to 65535 (such as 127.0.0.1:9273)", port)
	}
	if m.AllowRemote {
		return
	}
	switch err := metrics.LoopbackHost(host); {
	case errors.Is(err, metrics.ErrEveryInterface):
		doc.Errorf("metrics.listen", "%q listens on every interface; use a loopback address such as 127.0.0.1:9273, or set metrics.allow_remote: true", m.Listen)
	case err != nil:
		doc.Errorf("metrics.listen", "%s is not a loopback address; use one such as 127.0.0.1:9273, or set metrics.allow_remote: true", host)
	}
}

// metricsDefaults resolves the token file once the buffer's path is known.
func (c *Config) metricsDefaults() {
	m := &c.Metrics
	if m.TokenFile == "" {
		m.TokenFile = filepath.Join(filepath.Dir(c.Buffer.Path), DefaultTokenFile)
	} else {
		m.TokenFile = c.rel(m.TokenFile)
	}
	if m.ScrapeToken && !m.AllowRemote {
		c.Warnings = append(c.Warnings, c.File+": metrics.scrape_token has no effect without metrics.allow_remote: the listener is loopback only, where no token is asked")
	}
}
