package agent

import (
	"bytes"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"net/http"
	"net/http/httptest"
	"os"
	"path/filepath"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"fieldlink/config"
	firmwareprofiles "fieldlink/firmware-profiles"
	"fieldlink/internal/testtool"
	"fieldlink/internal/testtool/emutest"
	"fieldlink/packet"
	"fieldlink/sensors/profile"
)

func profiles(string) (profile.Set, error) { return profile.Load(firmwareprofiles.FS, "") }

// emulate serves the named profiles as slaves 1, 2, … over Modbus TCP on a
// loopback port until the test ends.
func emulate(t *testing.T, names ...string) string {
	_, addr := emutest.Serve(t, false, names...)
	return addr
}

// site writes a site file polling one methane sensor at addr every 100ms,
// with the uplink section given, and loads it.
func site(t *testing.T, addr, uplink string) *config.Config {
	t.Helper()
	return loadSiteFile(t, t.TempDir(), mineSite("gw-agent", addr, uplink).String())
}

// mineSite is the agent tests' mine: one methane sensor at addr polled
// every 100ms by gateway, then the sections given (uplink, remote_config).
func mineSite(gateway, addr, sections string) testtool.SiteFile {
	return testtool.SiteFile{
		Site: `{id: "M1", id_field: MineId}`, Gateway: gateway, Buffer: "buf.db", Metrics: "off", Bus: "tcp://" + addr,
		Devices: []string{"{name: ch4-1, profile: generic-mine-methane, slave: 1, interval: 100ms}"},
		Extra:   sections,
	}
}

// loadSiteFile writes src as dir/site.yaml and loads it.
func loadSiteFile(t *testing.T, dir, src string) *config.Config {
	t.Helper()
	file := filepath.Join(dir, "site.yaml")
	if err := os.WriteFile(file, []byte(src), 0o644); err != nil {
		t.Fatal(err)
	}
	c, err := config.Load(file, profiles)
	if err != nil {
		t.Fatal(err)
	}
	return c
}

// ingest is an HTTP upstream that answers every batch with status and
// counts the packets it was sent.
type ingest struct {
	*httptest.Server
	packets atomic.Int64
	status  atomic.Int64
}

func newIngest(t *testing.T, status int) *ingest {
	in := &ingest{}
	in.status.Store(int64(status))
	in.Server = httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		body, _ := io.ReadAll(r.Body)
		in.packets.Add(int64(bytes.Count(body, []byte(`"DataHead"`))))
		w.WriteHeader(int(in.status.Load()))
	}))
	t.Cleanup(in.Close)
	return in
}

// stopWithin stops g, failing the test if Stop hangs (a hang detector, not
// a performance bound).
func stopWithin(t *testing.T, g *Agent, d time.Duration) error {
	t.Helper()
	done := make(chan error, 1)
	go func() { done <- g.Stop() }()
	select {
	case err := <-done:
		return err
	case <-time.After(d):
		t.Fatalf("Stop did not return within %v", d)
		return nil
	}
}

// A registry that answers more upstreams than a gateway takes cannot stop
// it: the site's upstream keeps receiving packets.
func TestRegistryOverTheCapKeepsDelivering(t *testing.T) {
	up := newIngest(t, http.StatusNoContent)
	reg := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		var b strings.Builder
		b.WriteString(`{"upstreams":[`)
		for i := range 100 {
			if i > 0 {
				b.WriteString(",")
			}
			fmt.Fprintf(&b, `{"url":"%s/ingest/%d"}`, up.URL, i)
		}
		b.WriteString(`]}`)
		_, _ = io.WriteString(w, b.String())
	}))
	defer reg.Close()
	var log testtool.SyncBuffer
	c := site(t, emulate(t, "generic-mine-methane"), fmt.Sprintf(`uplink:
  probe: {interval: 200ms, timeout: 100ms}
  upstreams:
    - url: %s/site
  registry: {url: %q, refresh: 1s}
`, up.URL, reg.URL))
	g, err := Start(c, Options{Logger: slog.New(slog.NewTextHandler(&log, nil))})
	if err != nil {
		t.Fatal(err)
	}
	defer g.Stop()
	testtool.WaitFor(t, 20*time.Second, "the registry's answer refused or cut", func() bool {
		return strings.Contains(log.String(), "100 upstreams") || strings.Contains(log.String(), "registry upstream not usable")
	})
	before := up.packets.Load()
	testtool.WaitFor(t, 20*time.Second, "packets delivered after the registry's answer", func() bool {
		return up.packets.Load() >= before+5
	})
	if err := stopWithin(t, g, 20*time.Second); err != nil {
		t.Fatal(err)
	}
}

// Stop while the only upstream answers 422 to every batch: the agent stops,
// and every packet stored is delivered, dead-lettered or still buffered.
func TestStopWhileEveryBatchIsRefused(t *testing.T) {
	up := newIngest(t, http.StatusUnprocessableEntity)
	c := site(t, emulate(t, "generic-mine-methane"), fmt.Sprintf(`uplink:
  probe: {interval: 200ms, timeout: 100ms}
  window: 8
  batch: 1
  upstreams:
    - url: %s/site
`, up.URL))
	g, err := Start(c, Options{})
	if err != nil {
		t.Fatal(err)
	}
	testtool.WaitFor(t, 20*time.Second, "batches refused by the upstream", func() bool { return up.packets.Load() >= 20 })
	if err := stopWithin(t, g, 15*time.Second); err != nil {
		t.Fatal(err)
	}
	stored, _ := g.Counts()
	st, _ := g.Delivery()
	c2 := *c
	q2, err := OpenBuffer(&c2, slog.New(slog.DiscardHandler))
	if err != nil {
		t.Fatal(err)
	}
	defer q2.Close()
	left := uint64(q2.Len())
	if st.Delivered != 0 {
		t.Errorf("%d delivered by an upstream that refuses everything", st.Delivered)
	}
	if st.DeadLettered+left != stored {
		t.Errorf("stored %d, dead-lettered %d + still buffered %d = %d: packets lost or counted twice",
			stored, st.DeadLettered, left, st.DeadLettered+left)
	}
}

// A reload whose new buses fail, when the old ones cannot reopen either,
// stops polling; the next reload, even from the very same file, must bring
// polling back.
func TestReloadAfterAFailedReloadRestoresPolling(t *testing.T) {
	addr := emulate(t, "generic-mine-methane")
	c := site(t, addr, "")
	var broken atomic.Bool
	var polled atomic.Int64
	g, err := Start(c, Options{
		OnPolled: func(*packet.Packet) { polled.Add(1) },
		OpenSensors: func(c *config.Config, log *slog.Logger) (*Sensors, error) {
			if broken.Load() {
				return nil, errors.New("port gone")
			}
			return OpenSensors(c, log)
		},
	})
	if err != nil {
		t.Fatal(err)
	}
	defer g.Stop()
	testtool.WaitFor(t, 10*time.Second, "polls", func() bool { return polled.Load() > 2 })

	c2, err := config.Load(c.File, profiles)
	if err != nil {
		t.Fatal(err)
	}
	c2.Buses[0].Devices[0].Interval = 150 * time.Millisecond
	broken.Store(true)
	if err := g.Reload(c2); err == nil {
		t.Fatal("a reload whose buses cannot open was accepted")
	}
	if n := len(g.Sensors().Status()); n != 0 {
		t.Fatalf("after both opens failed the site still shows %d devices", n)
	}
	broken.Store(false)
	if err := g.Reload(c); err != nil {
		t.Fatalf("reload with the running file: %v", err)
	}
	at := polled.Load()
	testtool.WaitFor(t, 10*time.Second, "polling back after the reload", func() bool { return polled.Load() > at+2 })
}

// Readers of the running parts (the metrics endpoints, -print) never wait
// for a reload in progress: it holds the reload lock while it stops the
// old parts, which can take seconds.
func TestReadersDoNotWaitForAReload(t *testing.T) {
	up := newIngest(t, http.StatusNoContent)
	c := site(t, emulate(t, "generic-mine-methane"), fmt.Sprintf(`uplink:
  upstreams:
    - url: %s/site
`, up.URL))
	g, err := Start(c, Options{})
	if err != nil {
		t.Fatal(err)
	}
	defer g.Stop()
	g.mu.Lock() // as a reload does while it stops the old uplink
	done := make(chan struct{})
	go func() {
		defer close(done)
		src := g.Sources()
		src.Devices()
		src.Buses()
		src.Modbus()
		src.Ready()
		src.Buffer()
		src.Delivery()
		src.Upstreams()
		_ = src.Selector()
		src.SelectorFallbacks()
		_ = g.Config()
	}()
	select {
	case <-done:
	case <-time.After(10 * time.Second):
		t.Error("a reader waited for the reload lock")
	}
	g.mu.Unlock()
	<-done
}
