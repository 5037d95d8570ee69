package main

import (
	"context"
	"crypto/sha256"
	"fmt"
	"log/slog"
	"reflect"
	"strings"
	"sync"

	"fieldlink/buffer"
	"fieldlink/config"
	"fieldlink/metrics"
	"fieldlink/packet"
	"fieldlink/sdnotify"
	"fieldlink/sensors"
	"fieldlink/sensors/modbus"
)

// daemon is `gateway run`'s moving parts, swappable by a reload (SIGHUP):
// the south side (buses and line sensors polling into emit) and the north
// side (upstreams and the delivery loop). The buffer and the sink between
// them stay open across reloads, so a reload loses no packet: the polls in
// progress finish into the sink, and what the delivery loop had leased
// goes back to the buffer for the next north side.
type daemon struct {
	file string
	log  *slog.Logger
	emit func(*packet.Packet)
	q    *buffer.Buffer // nil without an uplink

	mu      sync.Mutex
	cfg     *config.Config
	site    *site
	north   *north
	secrets [32]byte // secretsDigest of cfg when its north side started

	southCancel context.CancelFunc
	southDone   chan struct{}
	northCancel context.CancelFunc
}

// startSouth polls d.site under ctx until stopSouth.
func (d *daemon) startSouth(ctx context.Context) {
	ctx, cancel := context.WithCancel(ctx)
	done := make(chan struct{})
	s := d.site
	go func() { defer close(done); s.run(ctx, d.emit) }()
	d.southCancel, d.southDone = cancel, done
}

// stopSouth ends the polls (each poll in progress ends at its next
// request) and waits; the site's ports stay open until closeSite.
func (d *daemon) stopSouth() {
	if d.southCancel != nil {
		d.southCancel()
		<-d.southDone
		d.southCancel = nil
	}
}

// startNorth starts the uplink of cfg under ctx.
func (d *daemon) startNorth(ctx context.Context, cfg *config.Config) error {
	ctx, cancel := context.WithCancel(ctx)
	n, err := startNorth(ctx, cfg, d.q, d.log)
	if err != nil {
		cancel()
		return err
	}
	d.north, d.northCancel, d.secrets = n, cancel, secretsDigest(cfg)
	return nil
}

// stopNorth ends the delivery loop (sends in flight are acked or released
// to the buffer) and disconnects every upstream.
func (d *daemon) stopNorth() {
	if d.north != nil {
		d.northCancel()
		d.north.stop()
		d.north = nil
	}
}

// Accessors for the metrics, which outlive any one site or north.
func (d *daemon) current() (*site, *north) {
	d.mu.Lock()
	defer d.mu.Unlock()
	return d.site, d.north
}

func (d *daemon) status() []sensors.DeviceStatus       { s, _ := d.current(); return s.status() }
func (d *daemon) busSamples() []metrics.BusSample      { s, _ := d.current(); return s.busSamples() }
func (d *daemon) modbusStats() map[string]modbus.Stats { s, _ := d.current(); return s.modbusStats() }

// reload loads the site file again and applies it: the south side is
// rebuilt if anything it polls changed, the north side if the uplink (or a
// password behind it) changed. A file with errors, or a change that only a
// restart can apply, is refused with its reasons and the running
// configuration stays in force, whole.
func (d *daemon) reload(pollCtx, northCtx context.Context) {
	log := d.log.With("component", "reload", "file", d.file)
	_ = sdnotify.Notify("RELOADING=1")
	defer func() { _ = sdnotify.Ready() }()
	c, err := config.Load(d.file, loadProfiles)
	if err != nil {
		log.Error("site file refused; the running configuration stays in force")
		for _, line := range strings.Split(err.Error(), "\n") {
			log.Error("site file error", "error", line)
		}
		return
	}
	for _, w := range c.Warnings {
		log.Warn("site file warning", "warning", w)
	}
	old := d.cfg
	if why := restartNeeded(old, c); len(why) > 0 {
		log.Error("site file refused: a restart is needed to apply it (systemctl restart fieldlink); the running configuration stays in force",
			"changed", strings.Join(why, ", "))
		return
	}
	south, north := southChanged(old, c), d.q != nil && northChanged(old, c, d.secrets)
	if !south && !north {
		log.Info("site file unchanged in effect; nothing to do")
		d.mu.Lock()
		d.cfg = c
		d.mu.Unlock()
		return
	}
	if south {
		// The new site may open the same serial ports: close the old
		// one first, and reopen it if the new one cannot open.
		d.stopSouth()
		d.site.close()
		s, err := openSite(c, d.log)
		if err != nil {
			log.Error("site file refused: its buses cannot open; the running configuration stays in force", "err", err)
			if s, err = openSite(old, d.log); err != nil {
				log.Error("the running buses cannot reopen either; polling stops until the next reload", "err", err)
				s = &site{cfg: old, stamper: d.site.stamper, enc: d.site.enc}
			}
			d.mu.Lock()
			d.site = s
			d.mu.Unlock()
			d.startSouth(pollCtx)
			return
		}
		d.mu.Lock()
		d.site = s
		d.mu.Unlock()
		d.startSouth(pollCtx)
	}
	if north {
		d.mu.Lock()
		d.stopNorth()
		err := d.startNorth(northCtx, c)
		if err != nil {
			log.Error("new uplink cannot start; the previous uplink is restored", "err", err)
			if err := d.startNorth(northCtx, old); err != nil {
				log.Error("the previous uplink cannot restart either; packets wait in the buffer until the next reload", "err", err)
			}
		}
		d.mu.Unlock()
		if err != nil {
			return // the south side, if changed, is the new one
		}
	}
	d.mu.Lock()
	d.cfg = c
	d.mu.Unlock()
	attrs := []any{"devices", c.DeviceCount(), "south", south, "north", north}
	if c.Uplink != nil {
		attrs = append(attrs, "upstreams", len(c.Uplink.Upstreams), "selector", c.Uplink.Selector)
	}
	log.Info("site file reloaded", attrs...)
}

// restartNeeded names what differs between a and b that a reload cannot
// apply to a running gateway: the buffer (its file is open), the metrics
// listener, and whether there is an uplink at all.
func restartNeeded(a, b *config.Config) []string {
	var why []string
	if !reflect.DeepEqual(a.Buffer, b.Buffer) {
		why = append(why, "buffer")
	}
	if !reflect.DeepEqual(a.Metrics, b.Metrics) {
		why = append(why, "metrics")
	}
	if (a.Uplink == nil) != (b.Uplink == nil) {
		why = append(why, "uplink added or removed")
	}
	return why
}

// southChanged reports whether anything the pollers or the packets depend
// on differs: the site's identity and time zone, buses, devices, line
// sensors, packet encoding, or a firmware profile's content.
func southChanged(a, b *config.Config) bool {
	return a.Site != b.Site || a.Gateway != b.Gateway || a.Packet != b.Packet ||
		!reflect.DeepEqual(a.Buses, b.Buses) || !reflect.DeepEqual(a.SerialSensors, b.SerialSensors) ||
		!reflect.DeepEqual(a.Profiles, b.Profiles)
}

// northChanged reports whether the uplink differs, including the topic
// variables (site and gateway ids) and the passwords behind password_file
// and password_env, which a reload rereads (secrets is the digest of the
// passwords the running uplink started with).
func northChanged(a, b *config.Config, secrets [32]byte) bool {
	return a.Site.ID != b.Site.ID || a.Gateway.ID != b.Gateway.ID ||
		!reflect.DeepEqual(a.Uplink, b.Uplink) || secretsDigest(b) != secrets
}

// secretsDigest hashes every upstream's password as it reads now, so a
// changed password file is seen without keeping passwords around.
func secretsDigest(c *config.Config) [32]byte {
	h := sha256.New()
	if c.Uplink != nil {
		for _, u := range c.Uplink.Upstreams {
			pw, err := password(c, u)
			fmt.Fprintf(h, "%d:%s:%v\x00", len(pw), pw, err)
		}
	}
	var out [32]byte
	h.Sum(out[:0])
	return out
}
