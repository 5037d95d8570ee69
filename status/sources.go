package status

import (
	"time"

	"fieldlink/buffer"
	"fieldlink/buffer/cardstore"
	"fieldlink/fleet"
	"fieldlink/selector"
	"fieldlink/sensors"
	"fieldlink/sensors/modbus"
	"fieldlink/uplink"
)

// Sources are the snapshot functions the status page reads at each view,
// and the metrics collectors the agent makes of them at each scrape. Any of
// them may be nil: its part of the page (or its metrics) is then left out.
// Each may be called from several views and scrapes at once, so it must be
// safe for concurrent use (the snapshot methods it is meant for are).
type Sources struct {
	// Devices returns the status of every device: all buses' Status and
	// every serial sensor's Status.
	Devices func() []sensors.DeviceStatus
	// Buses returns the busy time and overruns of every bus.
	Buses func() []sensors.BusSample
	// Modbus returns each bus's Modbus client counters, by bus name.
	Modbus func() map[string]modbus.Stats
	// Buffer returns the buffer's statistics; ok is false when the site
	// has no buffer (no uplink).
	Buffer func() (st buffer.Stats, ok bool)
	// Durability says whether the buffer stores packets on the card
	// ([cardstore.Store.State]); nil without a buffer.
	Durability func() cardstore.State
	// Delivery returns the delivery loop's counters; ok is false when the
	// site has no uplink.
	Delivery func() (st uplink.DeliveryStats, ok bool)
	// Upstreams returns the selector's per-upstream statistics
	// ([selector.Table.Snapshot]). Their names are the credential-free
	// names the uplink gives them.
	Upstreams func() []selector.Stats
	// Selector returns the name of the selection strategy in use (a
	// reload may change it); nil or "" leaves out
	// fieldlink_selector_info.
	Selector func() string
	// Readings returns the last reading of every point, in the order of
	// Devices ([sensors.Poller.Readings]): the page's points, and on
	// /metrics when MetricsReadings is set.
	Readings func(now time.Time) []sensors.Reading

	// The metrics' own sources; the page does not read them.

	// SelectorFallbacks returns how many picks the strategy made by its
	// named fallback because no fresh server load report existed (cswlc,
	// irlb, load_aware); nil for a strategy without one.
	SelectorFallbacks func() uint64
	// Remote returns the remote configuration's last report; nil without
	// remote_config, or before its first report.
	Remote func() *fleet.Report
	// Commands returns how many downlink commands ended in each status;
	// nil without a downlink.
	Commands func() map[string]uint64
	// Ready reports whether the gateway is ready, and why not when it is
	// not (/readyz). Nil means always ready. See [sensors.DevicesAnswering].
	Ready func() (ready bool, why string)
	// MetricsReadings says whether /metrics shows Readings, as
	// fieldlink_reading: one gauge per good numeric point (the site
	// file's metrics.readings).
	MetricsReadings bool
	// HeldBack returns how many polled packets report by exception kept
	// from the buffer; nil leaves out fieldlink_packets_held_back_total.
	HeldBack func() uint64

	// The status page's own sources; the metrics do not read them.

	// Identity says who the gateway is and what it runs.
	Identity func() GatewayIdentity
	// Disk returns the space of the file system that holds the buffer;
	// ok is false when it cannot be read.
	Disk func() (d DiskSpace, ok bool)
	// Downlink returns the downlink's state. Nil when the gateway has no
	// downlink: the page then leaves it out.
	Downlink func() DownlinkStatus
}

// GatewayIdentity is who a gateway is and what it runs, as the agent
// knows it; the page shows it as an [Identity].
type GatewayIdentity struct {
	SiteID, GatewayID string
	// Location is the site's time zone, for the times the page shows.
	Location *time.Location
	Version  string
	Started  time.Time // when the gateway started
	// ConfigFile is the site file in force, and ConfigSHA256 the SHA-256
	// (hex) of its bytes as they were loaded.
	ConfigFile, ConfigSHA256 string
	// OnDiskSHA256 is the SHA-256 of the site file on disk now, or
	// OnDiskError why it cannot be read: a file edited and not (or not
	// successfully) reloaded differs from the one in force.
	OnDiskSHA256, OnDiskError string
	// LastReload is the latest reload asked since the start; nil if none.
	LastReload *ReloadResult
	// Remote is the remote configuration's last report; nil without
	// remote_config (or before its first report).
	Remote *fleet.Report
}

// ReloadResult is the outcome of a reload.
type ReloadResult struct {
	At time.Time
	// Err is why the reload was refused (the running configuration stayed
	// in force); "" when it was applied.
	Err string
}

// DiskSpace is the space of a file system.
type DiskSpace struct {
	Path        string // a file or directory on it
	Free, Total uint64 // bytes; Free is what an unprivileged writer may use
}

// DownlinkStatus is the state of the downlink (commands from the platform
// to the devices), for the status page.
type DownlinkStatus struct {
	Enabled bool
	// Unsigned: commands run without a signature (downlink.allow_unsigned),
	// so anyone who can publish on the broker can write to the devices.
	Unsigned bool
	// Commands are the latest commands, newest first.
	Commands []DownlinkCommand
}

// DownlinkCommand is one command the downlink received.
type DownlinkCommand struct {
	At      time.Time
	Device  string
	Command string // what was asked, as the page shows it: "write coil 3 = on"
	OK      bool
	Result  string // what happened: "done", or why it was refused or failed
}
