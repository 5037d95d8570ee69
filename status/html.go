package status

import (
	_ "embed"
	"html"
	"regexp"
	"strconv"
	"strings"
	"time"

	"fieldlink/metrics"
)

// The page's style and script, inlined: the gateway is often offline, so
// the page loads nothing from anywhere, and its Content-Security-Policy
// allows these two by hash and nothing else.
var (
	//go:embed page.css
	pageStyle string
	//go:embed page.js
	pageScript string

	pageCSP = "default-src 'none'; connect-src 'self'; form-action 'self'; frame-ancestors 'none'; base-uri 'none'; " +
		"script-src " + metrics.CSPHash(pageScript) + "; style-src " + metrics.CSPHash(pageStyle)
)

// view is how the page was asked for.
type view struct{ errorsOnly, raw bool }

// renderPage is the whole page: the header with the filters, the body of
// renderMain, the script.
func renderPage(s *Snapshot, v view) []byte {
	var p writer
	p.loc, p.now = s.Site.loc, s.Generated
	title := "fieldlink"
	if s.Site.ID != "" || s.Site.Gateway != "" {
		title = s.Site.ID + " · " + s.Site.Gateway
	}
	p.raw(`<!doctype html><html lang=en><head><meta charset=utf-8>` +
		`<meta name=viewport content="width=device-width,initial-scale=1"><title>`)
	p.text(title + " · status")
	p.raw(`</title><style>` + pageStyle + `</style><noscript><meta http-equiv=refresh content=10></noscript></head><body class="`)
	if v.errorsOnly {
		p.raw("errors-only ")
	}
	if v.raw {
		p.raw("show-raw")
	}
	p.raw(`"><header><h1>`)
	p.text(title)
	p.raw(`</h1><form id=opts method=get action="/"><label><input type=checkbox id=errors name=errors value=1`)
	if v.errorsOnly {
		p.raw(" checked")
	}
	p.raw(`> errors only</label><label><input type=checkbox id=raw name=raw value=1`)
	if v.raw {
		p.raw(" checked")
	}
	p.raw(`> raw registers</label><button id=go>apply</button><span id=upd>`)
	p.raw("as of ")
	p.time(s.Generated)
	p.raw(`</span></form></header><div id=lost role=alert></div><main id=main>`)
	p.main(s)
	p.raw(`</main><script>` + pageScript + `</script></body></html>`)
	return p.bytes()
}

// renderMain is the page's body alone, which its script fetches to
// refresh it.
func renderMain(s *Snapshot) []byte {
	var p writer
	p.loc, p.now = s.Site.loc, s.Generated
	p.main(s)
	return p.bytes()
}

// writer builds the page; every text from the sources goes through text.
type writer struct {
	sb  strings.Builder
	loc *time.Location
	now time.Time
}

// raw and text are called some hundred times in the writer's methods: not
// inlined, they cost the field binary a call each instead of a copy of
// the builder's code.
//
//go:noinline
func (p *writer) raw(s string) { p.sb.WriteString(s) }

//go:noinline
func (p *writer) text(s string) { p.sb.WriteString(html.EscapeString(s)) }

// lines writes s, a line break where it has one: a refused reload's
// errors, one a line.
func (p *writer) lines(s string) {
	for i, l := range strings.Split(s, "\n") {
		if i > 0 {
			p.raw(`<br>`)
		}
		p.text(l)
	}
}

// rfc3339 finds the times a source wrote into its text ("expired at
// 2026-11-30T07:59:00Z").
var rfc3339 = regexp.MustCompile(`\d{4}-\d\d-\d\dT\d\d:\d\d:\d\d(\.\d+)?(Z|[+-]\d\d:\d\d)`)

// textTimes writes s with each time in it in the site's zone, as every
// other time on the page.
func (p *writer) textTimes(s string) {
	for {
		loc := rfc3339.FindStringIndex(s)
		if loc == nil {
			p.text(s)
			return
		}
		t, err := time.Parse(time.RFC3339Nano, s[loc[0]:loc[1]])
		if err != nil {
			p.text(s[:loc[1]])
		} else {
			p.text(s[:loc[0]])
			p.time(t)
		}
		s = s[loc[1]:]
	}
}
func (p *writer) bytes() []byte { return []byte(p.sb.String()) }

// pill writes a state as a coloured label.
func (p *writer) pill(state string) {
	p.raw(`<b class="pill `)
	p.text(state)
	p.raw(`">`)
	p.text(state)
	p.raw(`</b>`)
}

// time writes t in the site's time zone: the time of day if it is today
// there, else the date too.
func (p *writer) time(t time.Time) {
	loc := p.loc
	if loc == nil {
		loc = time.UTC
	}
	lt, ln := t.In(loc), p.now.In(loc)
	layout := "15:04:05"
	if lt.YearDay() != ln.YearDay() || lt.Year() != ln.Year() {
		layout = "2006-01-02 15:04"
	}
	p.raw(`<time datetime="` + t.UTC().Format(time.RFC3339) + `">`)
	p.text(lt.Format(layout) + " " + zone(lt))
	p.raw(`</time>`)
}

// since writes t and how long ago it was: 21:51:03 UTC+8 (1 min 14 s).
func (p *writer) since(t time.Time) {
	p.time(t)
	p.raw(` (` + forText(max(p.now.Sub(t).Seconds(), 0)) + `)`)
}

// zone names t's offset from UTC: UTC, UTC+8, UTC+5:30, UTC-3. The page
// is in the site's time, the logs in UTC: every time says which.
func zone(t time.Time) string {
	_, off := t.Zone()
	if off == 0 {
		return "UTC"
	}
	sign := "+"
	if off < 0 {
		sign, off = "-", -off
	}
	z := "UTC" + sign + itoa(off/3600)
	if m := off % 3600 / 60; m != 0 {
		z += ":" + strconv.Itoa(100 + m)[1:]
	}
	return z
}

// url writes an upstream's name, which may break after a slash, a colon
// or a question mark and nowhere else: "127.0.0.1:8086/" is too wide
// for a phone's column beside the figures.
func (p *writer) url(s string) {
	p.raw(`<span class=url>`)
	first := true
	for part := range strings.SplitAfterSeq(s, "/") {
		for _, piece := range splitAfterAny(part, ":?") {
			if !first {
				p.raw(`<wbr>`)
			}
			first = false
			p.text(piece)
		}
	}
	p.raw(`</span>`)
}

// splitAfterAny cuts s after each of the bytes in seps, but for the
// colon of a scheme ("http:/").
func splitAfterAny(s, seps string) []string {
	var out []string
	start := 0
	for i := 0; i < len(s)-1; i++ {
		if strings.IndexByte(seps, s[i]) >= 0 && s[i+1] != '/' {
			out = append(out, s[start:i+1])
			start = i + 1
		}
	}
	return append(out, s[start:])
}

// name writes a device's, point's or bus's name, kept on one line.
func (p *writer) name(s string) {
	p.raw(`<span class=name>`)
	p.text(s)
	p.raw(`</span>`)
}

// fine is the class of what "errors only" hides.
func fine(well bool) string {
	if well {
		return " fine"
	}
	return ""
}

func (p *writer) main(s *Snapshot) {
	p.alarms(s)
	p.alerts(s)
	p.summary(s)
	var serial []Device
	for _, b := range s.Buses {
		var devs []Device
		well := b.State == "ok"
		for _, d := range s.Devices {
			if d.Bus == b.Name && d.Kind == "modbus" {
				devs = append(devs, d)
				well = well && deviceWell(d)
			}
		}
		p.raw(`<section class="bus` + fine(well) + `" data-bus="`)
		p.text(b.Name)
		p.raw(`"><h2>`)
		p.name(b.Name)
		p.raw(` `)
		p.pill(b.State)
		p.raw(`</h2>`)
		if b.Cause != nil {
			p.raw(`<p class="why cause">`)
			if b.DownSince != nil {
				p.raw(`down since `)
				p.since(*b.DownSince)
				p.raw(` because `)
			}
			p.text(str(b.Cause))
			p.raw(`</p>`)
		}
		p.raw(`<p class=meta>`)
		p.bus(b)
		p.raw(`</p>`)
		for _, d := range devs {
			p.device(d)
		}
		p.raw(`</section>`)
	}
	for _, d := range s.Devices {
		if d.Kind == "serial" {
			serial = append(serial, d)
		}
	}
	if len(serial) > 0 {
		well := true
		for _, d := range serial {
			well = well && deviceWell(d)
		}
		p.raw(`<section class="bus` + fine(well) + `" data-bus=serial><h2>Serial sensors</h2>`)
		for _, d := range serial {
			p.device(d)
		}
		p.raw(`</section>`)
	}
	if s.Buffer != nil {
		p.buffer(s.Buffer)
	}
	if s.Uplink != nil {
		p.uplink(s.Uplink)
	}
	if s.Downlink != nil {
		p.downlink(s.Downlink)
	}
	p.site(s)
}

func deviceWell(d Device) bool {
	if d.Health != "ok" {
		return false
	}
	for _, pt := range d.Points {
		if pt.Quality != "good" || pt.Alarm {
			return false
		}
	}
	return true
}

// alarms are the points past an alarm threshold, first on the page: for
// a mine's methane sensor they are what a technician looks for first.
// Each says its value (or its last reading, marked, when no longer
// good), the threshold crossed, and since when.
func (p *writer) alarms(s *Snapshot) {
	if s.Summary.PointsInAlarm == 0 {
		return
	}
	p.raw(`<section class=alarm id=alarms><h2>Alarm: ` + plural(s.Summary.PointsInAlarm, "point") + ` past a threshold</h2><ul>`)
	for _, d := range s.Devices {
		for _, pt := range d.Points {
			if !pt.Alarm {
				continue
			}
			p.raw(`<li data-alarm="`)
			p.text(d.Name + "/" + pt.Name)
			p.raw(`">`)
			p.name(d.Name)
			p.raw(` `)
			p.name(pt.Name)
			p.raw(` `)
			unit := ""
			if pt.Unit != nil {
				unit = " " + *pt.Unit
			}
			if pt.Value != nil {
				p.raw(`<b>`)
				p.text(*pt.Value + unit)
				p.raw(`</b>`)
			} else {
				p.raw(`<b>`)
				p.text(pt.Quality)
				p.raw(`</b> (last read `)
				p.text(str(pt.LastValue) + unit)
				p.raw(`)`)
			}
			if th := pt.AlarmThreshold; th != nil {
				p.text(", at or " + th.Crossed + " " + strconv.FormatFloat(th.Limit, 'f', -1, 64) + unit)
			}
			if pt.AlarmSince != nil {
				p.raw(` since `)
				p.since(*pt.AlarmSince)
			}
			p.raw(`</li>`)
		}
	}
	p.raw(`</ul></section>`)
}

func itoa(n int) string    { return strconv.Itoa(n) }
func utoa(n uint64) string { return strconv.FormatUint(n, 10) }
func percent(f float64) string {
	return strconv.FormatFloat(100*f, 'f', 0, 64) + "\u00a0%"
}

// dur writes seconds as ms below 10 s, to a tenth below 10 ms.
func dur(s float64) string {
	switch {
	case s < 0.01:
		return strconv.FormatFloat(s*1000, 'f', 1, 64) + "\u00a0ms"
	case s < 10:
		return strconv.FormatFloat(s*1000, 'f', 0, 64) + "\u00a0ms"
	}
	return ageText(s)
}

// ageText writes an age the way a person says it: 4 s, 12 min, 3 h 5 min, 2 d 4 h.
func ageText(s float64) string {
	n := int64(s + 0.5)
	switch {
	case n < 120:
		return strconv.FormatInt(n, 10) + " s"
	case n < 3600:
		return strconv.FormatInt(n/60, 10) + " min"
	case n < 86400:
		return strconv.FormatInt(n/3600, 10) + " h " + strconv.FormatInt(n%3600/60, 10) + " min"
	}
	return strconv.FormatInt(n/86400, 10) + " d " + strconv.FormatInt(n%86400/3600, 10) + " h"
}

// forText writes how long something has lasted, to the second below an
// hour: 14 s, 1 min 14 s, 2 h 5 min, 3 d 4 h.
func forText(s float64) string {
	n := int64(s + 0.5)
	switch {
	case n < 60:
		return strconv.FormatInt(n, 10) + " s"
	case n < 3600:
		return strconv.FormatInt(n/60, 10) + " min " + strconv.FormatInt(n%60, 10) + " s"
	}
	return ageText(s)
}

// size writes bytes in binary units.
func size(b uint64) string {
	const unit = 1024
	if b < unit {
		return strconv.FormatUint(b, 10) + " B"
	}
	f, u := float64(b), 0
	for f >= unit && u < 4 {
		f /= unit
		u++
	}
	return strconv.FormatFloat(f, 'f', 1, 64) + " " + [...]string{"B", "KiB", "MiB", "GiB", "TiB"}[u]
}
