package status_test

import (
	"context"
	"fmt"
	"net/url"
	"os"
	"path/filepath"
	"regexp"
	"strings"
	"testing"
	"time"

	"github.com/chromedp/chromedp"

	"fieldlink/internal/testtool"
)

// The page in chromium at a phone's width (390 px), against a running
// `gateway run` whose first bus reads a methane sensor past its alarm
// threshold, whose second bus's serial port is missing (the adapter not
// plugged in), and whose only upstream is a real InfluxDB that has no
// such database: the alarm comes first, with the value, the threshold
// and since when; the bus says its port is missing, since when and what
// to do; the upstream says it fails, since when, and that the database
// does not exist; every time is in the site's zone; nothing breaks
// inside a word, the age column stays, and nothing is wider than the
// screen.
func TestBrowserAtAFarm(t *testing.T) {
	chromium := testtool.Require(t, "chromium", "chromium")
	bin := testtool.BuildGateway(t)
	influx := testtool.StartInfluxd(t) // no database made: "farm" does not exist
	mine := newEmu(t, "generic-mine-methane")
	port := "/dev/ttyFIELDLINK-not-plugged-" + fmt.Sprint(os.Getpid())
	addr := "127.0.0.1:0" // the gateway's choice, read back from its log
	c := writeSite(t, fmt.Sprintf(`site: {id: "M001", id_field: MineId, timezone: Asia/Shanghai}
gateway: {id: gw-mine-1}
buffer: {path: buf.db}
metrics: {listen: %q}
buses:
  - name: mine-face
    url: tcp://%s
    devices:
      - {name: ch4-1, profile: generic-mine-methane, slave: 1, interval: 1s, points: [{point: CH4, alarm: {above: 0}}]}
  - name: pump-house
    url: rtu://%s?baud=9600
    devices:
      - {name: soil-1, profile: jxct-jxbs-3001-tr, slave: 1, interval: 1s}
uplink:
  probe: {interval: 1s, timeout: 500ms}
  upstreams:
    - {url: %q, encoding: influx_line}
`, addr, mine.addr, port, influx.URL("/write", url.Values{"db": {"farm"}})))
	gwLog, _ := runGateway(t, bin, c.File)
	addr = testtool.MetricsAddr(t, gwLog.String)
	tab := openStatus(t, chromium, addr)
	ctx, run := tab.ctx, tab.run
	evalAs := func(what, expr string) string { t.Helper(); return evalIn[string](tab, what, expr) }
	await := func(what, expr string, timeout time.Duration) bool {
		t.Helper()
		wctx, cancel := context.WithTimeout(ctx, timeout)
		defer cancel()
		if _, err := chromedp.Run(wctx, chromedp.Poll[bool](expr)); err != nil {
			body, _ := chromedp.Run(ctx, chromedp.Evaluate[string](`document.body.innerText`))
			t.Errorf("browser: %s: not within %v (%v)\npage:\n%.3000s", what, timeout, err, body)
			return false
		}
		return true
	}
	text := func(sel string) string {
		t.Helper()
		return evalAs("the text of "+sel, `(document.querySelector(`+jsString(sel)+`)||{innerText:''}).innerText`)
	}

	run("load the page at phone width", chromedp.EmulateViewport(390, 844), chromedp.Navigate("http://"+addr+"/"))
	await("the alarm", `document.querySelector('#alarms [data-alarm="ch4-1/CH4"]')!==null`, 30*time.Second)
	await("the missing port", `(document.querySelector('[data-bus="pump-house"] .cause')||{textContent:''}).textContent.includes('missing')`, 30*time.Second)
	await("the failing upstream", `[...document.querySelectorAll('[data-upstream] .pill')].some(e=>e.textContent==='failing')`, 60*time.Second)

	// The alarm: first on the page, in words.
	if first := evalAs("what comes first", `document.getElementById('main').firstElementChild.id`); first != "alarms" {
		t.Errorf("first on the page: %q, want the alarms", first)
	}
	alarm := text(`#alarms [data-alarm="ch4-1/CH4"]`)
	if !regexp.MustCompile(`^ch4-1 CH4 [0-9.]+ %VOL, at or above 0 %VOL since \d\d:\d\d:\d\d UTC\+8 \((\d+ s|\d+ min \d+ s)\)$`).MatchString(alarm) {
		t.Errorf("the alarm: %q", alarm)
	}
	if h := text(`#alarms h2`); h != "Alarm: 1 point past a threshold" {
		t.Errorf("the alarms' heading: %q", h)
	}

	// The missing port: at its bus, since when, and what to do.
	cause := text(`[data-bus="pump-house"] .cause`)
	if want := "because port " + port + " missing: is the adapter plugged in?"; !regexp.MustCompile(`^down since \d\d:\d\d:\d\d UTC\+8 \((\d+ s|\d+ min \d+ s)\) ` + regexp.QuoteMeta(want) + `$`).MatchString(cause) {
		t.Errorf("the bus's cause: %q, want down since … %s", cause, want)
	}

	// The wrong database: the upstream fails, since when, and why.
	rows := evalAs("the upstream's rows", `[...document.querySelectorAll('[data-upstream]')].map(e=>e.innerText).join(' | ')`)
	if !strings.Contains(rows, "failing since") || !strings.Contains(rows, `database not found: "farm"`) || strings.Contains(rows, "100 %") {
		t.Errorf("the upstream's rows: %q", rows)
	}
	if s := text(`#summary .meta`); !strings.Contains(s, "0 of 1 upstreams up (1 failing)") {
		t.Errorf("the summary: %q", s)
	}

	// Every time in the site's zone, the age column there, no word broken,
	// nothing wider than the screen.
	if bad := evalAs("the times", `[...document.querySelectorAll('time')].map(e=>e.textContent).filter(s=>!/ UTC\+8$/.test(s)).join(', ')`); bad != "" {
		t.Errorf("times not in the site's zone: %s", bad)
	}
	if n := evalAs("the age cells shown", `String([...document.querySelectorAll('[data-device="ch4-1"] td.age')].filter(e=>e.offsetParent!==null&&e.textContent!=='').length)`); n == "0" {
		t.Error("the age column is hidden at 390 px")
	}
	png, err := chromedp.Run(ctx, chromedp.FullScreenshot(100))
	if err != nil || len(png) == 0 {
		t.Fatalf("screenshot: %d bytes, %v", len(png), err)
	}
	if err := os.WriteFile(filepath.Join(artefacts(t), "status-farm-phone.png"), png, 0o644); err != nil {
		t.Fatal(err)
	}
	checkWords(t, ctx)
	if fits, err := chromedp.Run(ctx, chromedp.Evaluate[bool](`document.documentElement.scrollWidth<=window.innerWidth`)); err != nil || !fits {
		wide := evalAs("what is too wide", `[...document.querySelectorAll('#uplink th, #uplink td')].map(e=>e.tagName+Math.round(e.getBoundingClientRect().width)+JSON.stringify(e.textContent.slice(0,40))).join(' ')+' :: '+[...document.querySelectorAll('#main *')].filter(e=>e.getBoundingClientRect().right>window.innerWidth+0.5).slice(0,5).map(e=>e.tagName+'.'+e.className+' '+JSON.stringify(e.textContent.slice(0,60))).join('; ')`)
		t.Errorf("the page is wider than a 390 px phone screen (%v): %s", err, wide)
	}
}

// jsString is s as a JavaScript string literal.
func jsString(s string) string {
	return "'" + strings.NewReplacer(`\`, `\\`, `'`, `\'`).Replace(s) + "'"
}
