package status_test

import (
	"context"
	"flag"
	"fmt"
	"io"
	"net/http"
	"net/http/httptest"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/chromedp/chromedp"

	"fieldlink/agent"
	"fieldlink/internal/testtool"
)

var updateDocs = flag.Bool("update-docs", false, "copy the phone screenshot of the browser test to docs/status-page.png")

// artefacts is where the browser test keeps its screenshots:
// $FIELDLINK_ARTEFACTS if set, else the test's artifact directory (kept
// with go test -artifacts).
func artefacts(t *testing.T) string {
	if dir := os.Getenv("FIELDLINK_ARTEFACTS"); dir != "" {
		if err := os.MkdirAll(dir, 0o755); err != nil {
			t.Fatal(err)
		}
		return dir
	}
	return t.ArtifactDir()
}

// browser starts headless chromium for the test and returns a context for
// its actions, bounded to catch a hang, not a slow page.
func browser(t *testing.T, chromium string) context.Context {
	t.Helper()
	actx, cancelAlloc := chromedp.NewExecAllocator(context.Background(), append(chromedp.DefaultExecAllocatorOptions[:],
		chromedp.ExecPath(chromium), chromedp.NoSandbox, chromedp.DisableGPU, chromedp.Flag("disable-dev-shm-usage", true))...)
	t.Cleanup(cancelAlloc)
	bctx, cancelTab := chromedp.NewContext(actx)
	t.Cleanup(cancelTab)
	if err := chromedp.Do(bctx); err != nil { // starts the browser, for as long as bctx
		t.Fatalf("start chromium: %v", err)
	}
	ctx, cancel := context.WithTimeout(bctx, 3*time.Minute)
	t.Cleanup(cancel)
	return ctx
}

// statusTab is a browser tab on a gateway's status page.
type statusTab struct {
	t   *testing.T
	ctx context.Context
}

// openStatus waits until the gateway whose metrics listen on addr answers
// /healthz, and opens a browser for its status page.
func openStatus(t *testing.T, chromium, addr string) *statusTab {
	t.Helper()
	testtool.WaitFor(t, 30*time.Second, "the gateway's status page", func() bool {
		code, _, err := testtool.Get("http://" + addr + "/healthz")
		return err == nil && code == 200
	})
	return &statusTab{t: t, ctx: browser(t, chromium)}
}

// run runs the steps; a failed one fails the test with what the page says.
func (b *statusTab) run(what string, steps ...chromedp.Action[chromedp.Void]) {
	b.t.Helper()
	if err := chromedp.Do(b.ctx, steps...); err != nil {
		body, _ := chromedp.Run(b.ctx, chromedp.Evaluate[string](`document.body.innerText`))
		b.t.Fatalf("browser: %s: %v\npage:\n%.2000s", what, err, body)
	}
}

// visible is the step that waits until sel is visible.
func (b *statusTab) visible(sel string) chromedp.Action[chromedp.Void] {
	return chromedp.WaitVisible(chromedp.CSS(sel))
}

// evalIn evaluates expr on the page; an error fails the test.
func evalIn[T any](b *statusTab, what, expr string) T {
	b.t.Helper()
	v, err := chromedp.Run(b.ctx, chromedp.Evaluate[T](expr))
	if err != nil {
		b.t.Fatalf("browser: %s: %v", what, err)
	}
	return v
}

// The login form in the browser, for a client that is not on loopback
// (the handler is told the peer is on the LAN): the page asks for the
// token, a wrong one is refused, the right one opens the page and the
// cookie keeps it open across a reload.
func TestBrowserLogin(t *testing.T) {
	chromium := testtool.Require(t, "chromium", "chromium")
	e := newEmu(t, "generic-mine-methane")
	c := writeSite(t, fmt.Sprintf(`site: {id: "M9"}
gateway: {id: gw-login}
buffer: {path: buf.db}
metrics: {listen: "0.0.0.0:9273", allow_remote: true}
buses:
  - name: a
    url: tcp://%s
    devices:
      - {name: ch4-1, profile: generic-mine-methane, slave: 1, interval: 200ms}
`, e.addr))
	g, err := agent.Start(c, agent.Options{})
	if err != nil {
		t.Fatal(err)
	}
	defer g.Stop()
	h := agent.MetricsHandler(c, g.Sources(), testtool.Logger(t))
	tok, err := os.ReadFile(c.Metrics.TokenFile)
	if err != nil {
		t.Fatal(err)
	}
	lan := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		r.RemoteAddr = "192.0.2.9:40000" // as a phone on the LAN
		h.ServeHTTP(w, r)
	}))
	defer lan.Close()

	ctx := browser(t, chromium)
	do := func(what string, steps ...chromedp.Action[chromedp.Void]) {
		t.Helper()
		sctx, cancel := context.WithTimeout(ctx, 30*time.Second)
		defer cancel()
		if err := chromedp.Do(sctx, steps...); err != nil {
			loc, _ := chromedp.Run(ctx, chromedp.Location())
			body, _ := chromedp.Run(ctx, chromedp.Evaluate[string](`document.body.innerText`))
			t.Fatalf("browser: %s: %v\nat %s:\n%.500s", what, err, loc, body)
		}
	}
	do("the login form", chromedp.Navigate(lan.URL+"/"), chromedp.WaitVisible(chromedp.CSS(`#t`)))
	do("a wrong token", chromedp.SendKeys(chromedp.CSS(`#t`), "not-the-token-at-all"), chromedp.Click(chromedp.CSS(`#f button`)))
	if _, err := chromedp.Run(ctx, chromedp.Poll[bool](`document.getElementById('err').textContent!==''`)); err != nil {
		t.Fatalf("no answer to a wrong token: %v", err)
	}
	if msg, err := chromedp.Run(ctx, chromedp.Text(chromedp.CSS(`#err`))); err != nil || msg != "Wrong token." {
		t.Errorf("after a wrong token: %q, %v", msg, err)
	}
	do("the token", chromedp.SetValue(chromedp.CSS(`#t`), strings.TrimSpace(string(tok))),
		chromedp.Click(chromedp.CSS(`#f button`)), chromedp.WaitVisible(chromedp.CSS(`[data-device="ch4-1"]`)))
	do("a reload", chromedp.Reload(), chromedp.WaitVisible(chromedp.CSS(`[data-device="ch4-1"]`)))
	cookie, err := chromedp.Run(ctx, chromedp.Evaluate[string](`document.cookie`))
	if err != nil || strings.Contains(cookie, "fieldlink_session") {
		t.Errorf("the session cookie is readable by the page's script (%q, %v): not HttpOnly", cookie, err)
	}
}

// runGateway starts `gateway run -c site` until the test ends; the
// process is there to signal.
func runGateway(t *testing.T, bin, site string) (*testtool.SyncBuffer, *os.Process) {
	t.Helper()
	var log testtool.SyncBuffer
	cmd := exec.Command(bin, "run", "-c", site)
	cmd.Stdout, cmd.Stderr = io.Discard, &log
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	exited := make(chan struct{})
	go func() { _ = cmd.Wait(); close(exited) }()
	t.Cleanup(func() {
		_ = cmd.Process.Signal(syscall.SIGTERM)
		select {
		case <-exited:
		case <-time.After(30 * time.Second):
			_ = cmd.Process.Kill()
			<-exited
			t.Errorf("gateway did not stop within 30s of SIGTERM")
		}
		if t.Failed() {
			t.Logf("gateway log:\n%s", log.String())
		}
	})
	return &log, cmd.Process
}

// The page in Debian's chromium, headless, against a running `gateway
// run` that polls the emulator: the devices and their health are in the
// DOM, the page refreshes itself when a device goes offline, a stopped
// device's points show their quality and no number, the filters work, the
// page fits a phone's width; screenshots at phone and desktop width are
// kept as artefacts.
func TestBrowser(t *testing.T) {
	chromium := testtool.Require(t, "chromium", "chromium")
	bin := testtool.BuildGateway(t)
	mine, wind := newEmu(t, "generic-mine-methane", "jxct-jxbs-3001-co", "generic-mine-oxygen"), newEmu(t, "generic-wind-speed")
	ingest := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		_, _ = io.Copy(io.Discard, r.Body)
		w.WriteHeader(http.StatusNoContent)
	}))
	defer ingest.Close()
	addr := "127.0.0.1:0" // the gateway's choice, read back from its log
	c := writeSite(t, fmt.Sprintf(`site: {id: "M001", id_field: MineId, timezone: Asia/Shanghai}
gateway: {id: gw-mine-1}
buffer: {path: buf.db}
metrics: {listen: %q}
buses:
  - name: mine-face
    url: tcp://%s
    devices:
      - {name: ch4-1, profile: generic-mine-methane, slave: 1, interval: 1s}
      - {name: co-1, profile: jxct-jxbs-3001-co, slave: 2, interval: 1s}
      - {name: o2-1, profile: generic-mine-oxygen, slave: 3, interval: 1s}
  - name: return-airway
    url: tcp://%s
    timeout: 300ms
    backoff: 4s
    devices:
      - {name: wind-1, profile: generic-wind-speed, slave: 1, interval: 2s}
uplink:
  probe: {interval: 1s, timeout: 500ms}
  upstreams:
    - url: %s/ingest
`, addr, mine.addr, wind.addr, ingest.URL))
	gwLog, _ := runGateway(t, bin, c.File)
	addr = testtool.MetricsAddr(t, gwLog.String)
	url := "http://" + addr + "/"
	tab := openStatus(t, chromium, addr)
	ctx, run, visible := tab.ctx, tab.run, tab.visible
	eval := func(what, expr string) map[string]string {
		t.Helper()
		return evalIn[map[string]string](tab, what, expr)
	}
	text := func(sel string) string {
		t.Helper()
		v, err := chromedp.Run(ctx, chromedp.Text(chromedp.CSS(sel)))
		if err != nil {
			t.Fatalf("browser: text of %s: %v", sel, err)
		}
		return v
	}
	healthOf := func() map[string]string {
		t.Helper()
		return eval("read the devices' health", `Object.fromEntries([...document.querySelectorAll('[data-device]')].map(e=>[e.dataset.device,e.dataset.health]))`)
	}
	// notGoodCells are the value cells of the points that are not good.
	notGoodCells := func() map[string]string {
		t.Helper()
		return eval("read the points", `Object.fromEntries([...document.querySelectorAll('tr[data-quality]')].filter(r=>r.dataset.quality!=='good').map(r=>[r.closest('[data-device]').dataset.device+'/'+r.dataset.point+' '+r.dataset.quality,r.querySelector('td.v').textContent]))`)
	}
	shots := artefacts(t)
	shot := func(name string, w, h int64) {
		t.Helper()
		run("viewport for "+name, chromedp.EmulateViewport(w, h), chromedp.Sleep(300*time.Millisecond))
		png, err := chromedp.Run(ctx, chromedp.FullScreenshot(100))
		if err != nil || len(png) == 0 {
			t.Fatalf("screenshot %s: %d bytes, %v", name, len(png), err)
		}
		file := filepath.Join(shots, name)
		if err := os.WriteFile(file, png, 0o644); err != nil {
			t.Fatal(err)
		}
		t.Logf("screenshot: %s (%d bytes)", file, len(png))
	}

	run("load the page at phone width", chromedp.EmulateViewport(390, 844), chromedp.Navigate(url),
		visible(`[data-device="wind-1"][data-health="ok"]`), visible(`[data-device="o2-1"][data-health="ok"]`))
	h := healthOf()
	if len(h) != 4 || h["ch4-1"] != "ok" || h["co-1"] != "ok" || h["o2-1"] != "ok" || h["wind-1"] != "ok" {
		t.Fatalf("devices in the DOM: %v", h)
	}
	if fits, err := chromedp.Run(ctx, chromedp.Evaluate[bool](`document.documentElement.scrollWidth<=window.innerWidth`)); err != nil || !fits {
		t.Errorf("the page is wider than a 390 px phone screen (%v)", err)
	}
	checkWords(t, ctx)

	// The emulator of wind-1 stops: the page, left alone, refreshes
	// itself to say so.
	wind.stop()
	run("wait for wind-1 offline without a reload", visible(`[data-device="wind-1"][data-health="offline"]`))
	cells := notGoodCells()
	if len(cells) == 0 {
		t.Fatal("wind-1 is offline and no point is shown as not good")
	}
	for k, v := range cells {
		if strings.ContainsAny(v, "0123456789") {
			t.Errorf("%s shows %q: a number", k, v)
		}
	}
	if h := healthOf(); h["ch4-1"] != "ok" {
		t.Errorf("ch4-1 on the other bus: %s", h["ch4-1"])
	}
	if whyText := text(`[data-device="wind-1"] .why`); !strings.Contains(whyText, "in a row") {
		t.Errorf("wind-1's why: %q", whyText)
	}

	// Errors only: the healthy devices are hidden, wind-1 stays, the URL
	// keeps the filter; raw registers on demand.
	run("filter", chromedp.Click(chromedp.CSS(`#errors`)), chromedp.Click(chromedp.CSS(`#raw`)))
	shown := eval("what is shown", `Object.fromEntries([...document.querySelectorAll('[data-device]')].map(e=>[e.dataset.device,String(e.offsetParent!==null)]))`)
	loc, err := chromedp.Run(ctx, chromedp.Location())
	if err != nil {
		t.Fatal(err)
	}
	if shown["wind-1"] != "true" || shown["ch4-1"] != "false" || shown["o2-1"] != "false" || !strings.Contains(loc, "errors=1") || !strings.Contains(loc, "raw=1") {
		t.Errorf("errors only: shown %v, location %s", shown, loc)
	}
	if raw := text(`[data-device="wind-1"] tr[data-quality] td.raw`); !strings.Contains(raw, "last read") {
		t.Errorf("wind-1's raw cell %q does not give its last reading", raw)
	}
	run("unfilter", chromedp.Click(chromedp.CSS(`#errors`)), chromedp.Click(chromedp.CSS(`#raw`)))
	checkWords(t, ctx)
	shot("status-phone.png", 390, 844)
	shot("status-desktop.png", 1280, 900)
	if *updateDocs {
		b, err := os.ReadFile(filepath.Join(shots, "status-phone.png"))
		if err == nil {
			err = os.WriteFile(filepath.Join("..", "docs", "status-page.png"), b, 0o644)
		}
		if err != nil {
			t.Fatal(err)
		}
	}

	// A stale point: the device back, then stopped again, and the page
	// read while the device is degraded (failing, not yet offline). The
	// moment may pass between the JSON saying so and the page loading;
	// then the test tries again.
	var stale map[string]string
	for try := 1; try <= 5 && stale == nil; try++ {
		wind.start()
		run("wait for wind-1 back", visible(`[data-device="wind-1"][data-health="ok"]`))
		wind.stop()
		testtool.WaitFor(t, 30*time.Second, "wind-1 degraded", func() bool {
			for _, d := range fetchDoc(t, "http://"+addr).Devices {
				if d.Name == "wind-1" {
					return d.Health == "degraded"
				}
			}
			return false
		})
		run("reload", chromedp.Reload(), visible(`[data-device="wind-1"]`))
		if healthOf()["wind-1"] == "degraded" {
			stale = notGoodCells()
		} else {
			t.Logf("try %d: wind-1 went offline before the page loaded", try)
		}
	}
	if stale == nil {
		t.Fatal("never saw wind-1 degraded in the page")
	}
	found := false
	for k, v := range stale {
		found = found || (strings.HasPrefix(k, "wind-1/") && strings.HasSuffix(k, " stale") && v == "stale")
		if strings.ContainsAny(v, "0123456789") {
			t.Errorf("%s shows %q: a number", k, v)
		}
	}
	if !found {
		t.Errorf("no stale point of wind-1 while degraded: %v", stale)
	}
}
