package status_test

import (
	"context"
	"fmt"
	"os"
	"path/filepath"
	"regexp"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/chromedp/chromedp"

	"fieldlink/internal/testtool"
	"fieldlink/status"
)

// checkWords fails the test if a badge, name, time, column head or figure
// of the page in ctx spans more than one line, or an upstream's name
// breaks elsewhere than after a slash: words broken inside ("dow/n",
// "valve-/1") at a phone's width.
func checkWords(t *testing.T, ctx context.Context) {
	t.Helper()
	broke, err := chromedp.Run(ctx, chromedp.Evaluate[string](`[...document.querySelectorAll('#main .pill, #main .name, #main time, #main tr:first-child>th, #main .n, #main .id, #main td.age')].filter(e=>e.offsetParent!==null).filter(e=>{
		const lh=parseFloat(getComputedStyle(e).lineHeight)||parseFloat(getComputedStyle(e).fontSize)*1.4;
		return e.getClientRects().length!==1||e.getBoundingClientRect().height>1.5*lh}).map(e=>JSON.stringify(e.textContent)).join(', ')`))
	if err != nil {
		t.Fatalf("browser: words broken: %v", err)
	}
	if broke != "" {
		t.Errorf("broken across lines: %s", broke)
	}
	broke, err = chromedp.Run(ctx, chromedp.Evaluate[string](`[...document.querySelectorAll('#main .url')].flatMap(e=>[...e.childNodes]).filter(n=>n.nodeType===3).filter(n=>{
		const r=document.createRange();r.selectNodeContents(n);return r.getClientRects().length>1}).map(n=>JSON.stringify(n.textContent)).join(', ')`))
	if err != nil {
		t.Fatalf("browser: names broken: %v", err)
	}
	if broke != "" {
		t.Errorf("upstream names broken inside a part: %s", broke)
	}
}

// The page in chromium when things are wrong, against a running `gateway
// run` whose only upstream refuses connections and whose only bus goes
// down: the headline says nothing was delivered, how many packets wait
// and why in words, in red above the device summary; the bus's cause is
// said once, at the bus, and the badge says down; the buffer box agrees
// with itself; every time says its zone; at 390 px no badge or name
// breaks inside; a reload refused for errors in the file comes first,
// with them.
func TestBrowserWhenThingsAreWrong(t *testing.T) {
	chromium := testtool.Require(t, "chromium", "chromium")
	bin := testtool.BuildGateway(t)
	mine := newEmu(t, "generic-mine-methane", "jxct-jxbs-3001-co", "generic-mine-oxygen")
	closed := testtool.RefusedAddr(t) // nothing listens there
	addr := "127.0.0.1:0"             // the gateway's choice, read back from its log
	c := writeSite(t, fmt.Sprintf(`site: {id: "M001", id_field: MineId, timezone: Asia/Shanghai}
gateway: {id: gw-mine-1}
buffer: {path: buf.db}
metrics: {listen: %q}
buses:
  - name: mine-face-north
    url: tcp://%s
    timeout: 300ms
    backoff: 2s
    devices:
      - {name: ch4-sensor-1, profile: generic-mine-methane, slave: 1, interval: 1s}
      - {name: co-sensor-1, profile: jxct-jxbs-3001-co, slave: 2, interval: 1s}
      - {name: o2-sensor-1, profile: generic-mine-oxygen, slave: 3, interval: 1s}
uplink:
  probe: {interval: 1s, timeout: 500ms}
  upstreams:
    - url: http://%s/ingest
`, addr, mine.addr, closed))
	gwLog, proc := runGateway(t, bin, c.File)
	addr = testtool.MetricsAddr(t, gwLog.String)
	url := "http://" + addr + "/"
	tab := openStatus(t, chromium, addr)
	ctx, run, visible := tab.ctx, tab.run, tab.visible
	evalAs := func(what, expr string) string { t.Helper(); return evalIn[string](tab, what, expr) }
	// await reports whether expr became true within timeout (an error of
	// the test, not a hang, when it never does), so that the checks after
	// it still run.
	await := func(what, expr string, timeout time.Duration) bool {
		t.Helper()
		wctx, cancel := context.WithTimeout(ctx, timeout)
		defer cancel()
		if _, err := chromedp.Run(wctx, chromedp.Poll[bool](expr)); err != nil {
			t.Errorf("browser: %s: not within %v (%v)", what, timeout, err)
			return false
		}
		return true
	}

	// Packets wait, the upstream refuses: after StallAfter the headline
	// says so, in red, above the device summary.
	run("load the page at phone width", chromedp.EmulateViewport(390, 844), chromedp.Navigate(url),
		visible(`[data-device="o2-sensor-1"][data-health="ok"]`))
	await("the stall headline", `document.getElementById('stall')!==null`, status.StallAfter+30*time.Second)
	stall := evalAs("the stall", `(document.getElementById('stall')||{}).textContent||''`)
	if !regexp.MustCompile(`^Nothing delivered for \d+ s: \d+ packets? waiting; http://` + regexp.QuoteMeta(closed) +
		`/ingest: connection refused: nothing listens at ` + regexp.QuoteMeta(closed)).MatchString(stall) {
		t.Errorf("the stall headline: %q", stall)
	}
	if got := evalAs("where and how the stall shows", `(()=>{const s=document.getElementById('stall'),h=document.querySelector('#summary h2');if(!s)return 'nowhere';
		return (s.compareDocumentPosition(h)&Node.DOCUMENT_POSITION_FOLLOWING?'above':'below')+' '+getComputedStyle(s).backgroundColor})()`); got != "above rgb(179, 38, 30)" {
		t.Errorf("the stall headline is %s the device summary, want above on red (rgb(179, 38, 30))", got)
	}
	if row := evalAs("the upstream's row", `[...document.querySelectorAll('[data-upstream]')].map(e=>e.textContent).join(' ')`); !strings.Contains(row, "connection refused") {
		t.Errorf("the upstream's row: %q", row)
	}

	// The bus goes down: its cause once, at the bus; the badge says down.
	mine.stop()
	run("wait for every device offline", visible(`[data-device="ch4-sensor-1"][data-health="offline"]`),
		visible(`[data-device="co-sensor-1"][data-health="offline"]`), visible(`[data-device="o2-sensor-1"][data-health="offline"]`))
	if n := evalAs("the cause's count", `String(document.getElementById('main').innerText.split('refuses connections').length-1)`); n != "1" {
		t.Errorf("the bus's cause shows %s times, want once", n)
	}
	if b := evalAs("the headline's badge", `document.querySelector('#summary h2 .pill').textContent`); b != "down" {
		t.Errorf("no device answers, the headline's badge says %q", b)
	}

	// The buffer box agrees with itself: an age only for packets waiting.
	box := evalAs("the buffer box", `[...document.querySelectorAll('#buffer dd')].slice(0,2).map(d=>d.textContent).join(' | ')`)
	if m := regexp.MustCompile(`^(\d+) packets? .* \| (.*)$`).FindStringSubmatch(box); m == nil ||
		(m[1] == "0") != (m[2] == "none waiting") {
		t.Errorf("the buffer box: %q", box)
	}

	// Every time says its zone.
	if bad := evalAs("the times", `[...document.querySelectorAll('time')].map(e=>e.textContent).filter(s=>!/ UTC\+8$/.test(s)).join(', ')`); bad != "" {
		t.Errorf("times without their zone: %s", bad)
	}
	if n := evalAs("how many times", `String(document.querySelectorAll('time').length)`); n == "0" {
		t.Error("no time on the page")
	}

	// A reload refused for errors in the file: first on the page, with
	// the errors.
	broken, err := os.ReadFile(c.File)
	if err != nil {
		t.Fatal(err)
	}
	broken = []byte(strings.Replace(string(broken), "slave: 1, interval: 1s", "slave: 1, interval: 1s, windw: 3", 1))
	if err := os.WriteFile(c.File, broken, 0o644); err != nil {
		t.Fatal(err)
	}
	if err := proc.Signal(syscall.SIGHUP); err != nil {
		t.Fatal(err)
	}
	await("the refused reload", `(document.getElementById('alerts')||{textContent:''}).textContent.includes('reload was refused')`, 30*time.Second)
	if got := evalAs("what comes first", `document.getElementById('main').firstElementChild.id+' '+document.getElementById('alerts').textContent`); !strings.HasPrefix(got, "alerts The last reload was refused") || !strings.Contains(got, "windw") {
		t.Errorf("first on the page: %q", got)
	}

	// At 390 px no badge, name or time breaks inside, and nothing is wider
	// than the screen.
	shot := func(name string) {
		t.Helper()
		png, err := chromedp.Run(ctx, chromedp.FullScreenshot(100))
		if err != nil || len(png) == 0 {
			t.Fatalf("screenshot %s: %d bytes, %v", name, len(png), err)
		}
		if err := os.WriteFile(filepath.Join(artefacts(t), name), png, 0o644); err != nil {
			t.Fatal(err)
		}
	}
	shot("status-wrong-phone.png")
	checkWords(t, ctx)
	if fits, err := chromedp.Run(ctx, chromedp.Evaluate[bool](`document.documentElement.scrollWidth<=window.innerWidth`)); err != nil || !fits {
		wide := evalAs("what is too wide", `[...document.querySelectorAll('#main *')].filter(e=>e.getBoundingClientRect().right>window.innerWidth+0.5).slice(0,5).map(e=>e.tagName+'.'+e.className+' '+JSON.stringify(e.textContent.slice(0,60))).join('; ')`)
		t.Errorf("the page is wider than a 390 px phone screen (%v): %s", err, wide)
	}
}
