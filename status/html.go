package status

import (
	_ "embed"
	"html"
	"strconv"
	"strings"
	"time"

	"fieldlink/metrics"
	"fieldlink/uplink"
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

// url writes an upstream's name, which may break after a slash and
// nowhere else.
func (p *writer) url(s string) {
	p.raw(`<span class=url>`)
	for i, part := range strings.SplitAfter(s, "/") {
		if i > 0 {
			p.raw(`<wbr>`)
		}
		p.text(part)
	}
	p.raw(`</span>`)
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
		if pt.Quality != "good" {
			return false
		}
	}
	return true
}

func (p *writer) summary(s *Snapshot) {
	sum := s.Summary
	problems := sum.DevicesNotOK + sum.PointsNotGood + sum.UpstreamsDown
	p.raw(`<section id=summary>`)
	if d := sum.NothingDeliveredSeconds; d != nil && s.Buffer != nil && s.Uplink != nil {
		problems++
		p.raw(`<p class=stall id=stall>`)
		p.text(stallText(*d, s))
		p.raw(`</p>`)
	}
	p.raw(`<h2>`)
	switch {
	case sum.Devices == 0:
		p.raw(`No devices`)
	case sum.DevicesNotOK == 0:
		p.raw(`All ` + itoa(sum.Devices) + ` devices answer `)
		p.pill("ok")
	case sum.DevicesNotOK == sum.Devices && !anyStarting(s):
		p.raw(`None of ` + itoa(sum.Devices) + ` devices answers `)
		p.pill("down")
	default:
		p.raw(itoa(sum.DevicesNotOK) + ` of ` + itoa(sum.Devices) + ` devices not ok `)
		p.pill("degraded")
	}
	p.raw(`</h2><p class=meta>` + itoa(sum.Points-sum.PointsNotGood) + ` of ` + itoa(sum.Points) + ` points good`)
	if s.Uplink != nil {
		p.raw(` · ` + itoa(sum.UpstreamsActive) + ` of ` + itoa(len(s.Uplink.Upstreams)) + ` upstreams up`)
	}
	if s.Buffer != nil {
		p.raw(` · ` + itoa(s.Buffer.Waiting) + ` packets waiting`)
	}
	p.raw(`</p></section>`)
	if problems == 0 && s.Clock.Problem == nil && !s.Site.Config.Changed && (s.Downlink == nil || !s.Downlink.Unsigned) &&
		(s.Buffer == nil || s.Buffer.DurabilityProblem == nil) {
		p.raw(`<p class=allok>Nothing needs a look.</p>`)
	}
}

// durabilityText is the headline of a card that fails: what the buffer
// does meanwhile, in words.
func durabilityText(b *Buffer) string {
	t := *b.DurabilityProblem
	if !b.Durable {
		t += "; live readings go upstream from memory (" + plural(b.Volatile, "packet") + " waiting there, lost by a power cut) until the card recovers"
	}
	return t
}

// stallText is the headline of a stall: how long nothing was delivered,
// what waits, and each upstream's last error in words (those down first).
func stallText(d float64, s *Snapshot) string {
	t := "Nothing delivered for " + ageText(d) + ": " + plural(s.Buffer.Waiting, "packet") + " waiting"
	var down, up []string
	for _, u := range s.Uplink.Upstreams {
		if u.LastError == nil || u.State == "retired" {
			continue
		}
		if u.State == "down" {
			down = append(down, u.Name+": "+*u.LastError)
		} else {
			up = append(up, u.Name+": "+*u.LastError)
		}
	}
	if why := append(down, up...); len(why) > 0 {
		return t + "; " + strings.Join(why, "; ")
	}
	return t + "; " + itoa(s.Summary.UpstreamsActive) + " of " + itoa(len(s.Uplink.Upstreams)) + " upstreams up"
}

// anyStarting reports whether a device was not polled yet.
func anyStarting(s *Snapshot) bool {
	for _, d := range s.Devices {
		if d.Health == "unknown" {
			return true
		}
	}
	return false
}

// clientIDRecent is how long an upstream's last error that another client
// uses the gateway's MQTT client id stays among the warnings: the error
// stays in its row after the broker stops dropping the connection.
const clientIDRecent = 5 * time.Minute

// upstreams are u's upstreams; none when u is nil.
func (u *Uplink) upstreams() []Upstream {
	if u == nil {
		return nil
	}
	return u.Upstreams
}

// unsignedWords warn of a downlink that runs commands without a signature.
const unsignedWords = "commands run unsigned: anyone who can publish on the broker can write to the devices"

// alerts are what a technician must know before anything else: a reload
// refused, a clock that cannot be trusted, a site file not in force, a
// downlink open to anyone on the broker.
func (p *writer) alerts(s *Snapshot) {
	var msgs []string
	refused := s.Site.LastReload != nil && !s.Site.LastReload.Applied
	if refused {
		msgs = append(msgs, "The last reload was refused; the previous configuration stays in force. Fix the site file (gateway check -c "+
			s.Site.Config.File+" shows every error), then reload again: "+str(s.Site.LastReload.Error))
	}
	if s.Clock.Problem != nil {
		msgs = append(msgs, "Clock: "+*s.Clock.Problem+".")
	}
	if s.Site.Config.Changed && !refused {
		msgs = append(msgs, "The site file on disk differs from the one in force: reload it (systemctl reload fieldlink), or check it with gateway check.")
	}
	for _, u := range s.Uplink.upstreams() {
		if u.LastError != nil && strings.HasPrefix(*u.LastError, uplink.ErrMQTTClientIDInUse.Error()) &&
			u.LastErrorAt != nil && s.Generated.Sub(*u.LastErrorAt) < clientIDRecent {
			msgs = append(msgs, u.Name+": "+*u.LastError+".")
		}
	}
	if d := s.Downlink; d != nil && d.Unsigned {
		msgs = append(msgs, "Downlink: "+unsignedWords+".")
	}
	if b := s.Buffer; b != nil && b.DurabilityProblem != nil {
		msgs = append(msgs, durabilityText(b)+".")
	}
	if len(msgs) == 0 {
		return
	}
	p.raw(`<section class=alert id=alerts>`)
	for _, m := range msgs {
		p.raw(`<p>`)
		p.text(m)
		p.raw(`</p>`)
	}
	p.raw(`</section>`)
}

func (p *writer) bus(b Bus) {
	p.raw(plural(b.Devices, "device") + ` · ` + utoa(b.Requests) + ` requests · errors: `)
	e := b.Errors
	p.raw(`timeout ` + utoa(e.Timeout) + `, CRC ` + utoa(e.CRC) + `, exception ` + utoa(e.Exception) +
		`, framing ` + utoa(e.Framing) + `, link ` + utoa(e.IO))
	if b.LastRoundTripSeconds != nil {
		p.raw(` · last round trip ` + dur(*b.LastRoundTripSeconds) + ` (`)
		p.text(str(b.LastRoundTripDevice))
		p.raw(`)`)
	}
	if b.Utilisation != nil {
		p.raw(` · busy ` + percent(*b.Utilisation) + ` over ` + ageText(b.UtilisationWindowSeconds))
	}
	if b.Overruns > 0 {
		p.raw(` · ` + plural(int(min(b.Overruns, 1<<31)), "poll") + ` late`)
	}
}

func (p *writer) device(d Device) {
	p.raw(`<div class="dev h-`)
	p.text(d.Health)
	p.raw(fine(deviceWell(d)) + `" data-device="`)
	p.text(d.Name)
	p.raw(`" data-health="`)
	p.text(d.Health)
	p.raw(`"><h3>`)
	p.name(d.Name)
	p.raw(` `)
	p.pill(d.Health)
	p.raw(`</h3>`)
	if d.Why != nil {
		p.raw(`<p class=why>`)
		p.text(str(d.Why))
		p.raw(`</p>`)
	}
	p.raw(`<p class=meta>`)
	if d.LastOK != nil {
		p.raw(`last good `)
		p.time(*d.LastOK)
	} else {
		p.raw(`never read`)
	}
	if d.ConsecutiveFailures > 0 {
		p.raw(` · ` + plural(d.ConsecutiveFailures, "failure") + ` in a row`)
	}
	if d.LastPollSeconds != nil {
		p.raw(` · last poll ` + dur(*d.LastPollSeconds))
	}
	p.raw(` · ` + utoa(d.Polls) + ` polls, ` + utoa(d.Errors) + ` failed</p>`)
	if len(d.Points) > 0 {
		p.raw(`<table><tr><th>point</th><th>value</th><th>quality</th><th class=age>age</th><th class=raw>registers</th></tr>`)
		for _, pt := range d.Points {
			p.point(pt)
		}
		p.raw(`</table>`)
	}
	p.raw(`</div>`)
}

// point writes one row. A value is shown only while good; a stale or bad
// point shows its quality in the value's place, and its last reading only
// with the raw registers, marked as such.
func (p *writer) point(pt Point) {
	p.raw(`<tr class="q-`)
	p.text(pt.Quality)
	p.raw(fine(pt.Quality == "good") + `" data-point="`)
	p.text(pt.Name)
	p.raw(`" data-quality="`)
	p.text(pt.Quality)
	p.raw(`"><th>`)
	p.name(pt.Name)
	p.raw(`</th><td class=v>`)
	switch {
	case pt.Value != nil:
		p.text(*pt.Value)
		if pt.Unit != nil {
			p.raw(` <small>`)
			p.text(str(pt.Unit))
			p.raw(`</small>`)
		}
	case pt.Quality == "stale":
		p.raw(`<i class=stale>stale</i>`)
	case pt.At == nil:
		p.raw(`<i>no reading</i>`)
	default:
		p.raw(`<i>bad</i>`)
	}
	p.raw(`</td><td>`)
	p.pill(pt.Quality)
	p.raw(`</td><td class=age>`)
	if pt.AgeSeconds != nil {
		p.raw(ageText(*pt.AgeSeconds))
	}
	p.raw(`</td><td class=raw>`)
	p.text(str(pt.Raw))
	if pt.LastValue != nil {
		p.raw(` <small>(last read: `)
		p.text(*pt.LastValue)
		if pt.Unit != nil {
			p.raw(` `)
			p.text(str(pt.Unit))
		}
		p.raw(`)</small>`)
	}
	p.raw(`</td></tr>`)
}

func (p *writer) buffer(b *Buffer) {
	well := b.LastError == nil && b.Rejected == 0 && (b.MaxBytes == 0 || b.Bytes < b.MaxBytes*9/10) && b.DurabilityProblem == nil
	p.raw(`<section class="buffer` + fine(well) + `" id=buffer><h2>Buffer</h2><dl>`)
	if b.DurabilityProblem != nil {
		p.raw(`<dt>card</dt><dd class=why>`)
		p.text(*b.DurabilityProblem)
		if b.DurabilitySince != nil {
			p.raw(` (since `)
			p.time(*b.DurabilitySince)
			p.raw(`)`)
		}
		p.raw(`</dd>`)
	}
	if b.Volatile > 0 {
		p.raw(`<dt>in memory</dt><dd>` + itoa(b.Volatile) + ` packets, not durable</dd>`)
	}
	p.raw(`<dt>waiting</dt><dd>` + itoa(b.Waiting) + ` packets (` + itoa(b.Alarms) + ` alarms), ` + itoa(b.Leased) + ` being sent</dd>`)
	p.raw(`<dt>oldest</dt><dd>`)
	if b.OldestAgeSeconds != nil {
		p.raw(ageText(*b.OldestAgeSeconds) + ` old`)
	} else {
		p.raw(`none waiting`)
	}
	p.raw(`</dd><dt>size</dt><dd>` + size(uint64(b.Bytes)) + ` of ` + size(uint64(b.MaxBytes)) + ` (file ` + size(uint64(b.FileSize)) + `)</dd>`)
	p.raw(`<dt>evicted</dt><dd>` + utoa(b.Evicted) + ` packets, ` + utoa(b.Rejected) + ` refused when full, ` + utoa(b.DeadLetters) + ` dead letters</dd>`)
	p.raw(`<dt>free disk</dt><dd>`)
	if b.DiskFree != nil && b.DiskTotal != nil {
		p.raw(size(*b.DiskFree) + ` of ` + size(*b.DiskTotal))
	} else {
		p.raw(`unknown`)
	}
	p.raw(`</dd>`)
	if b.LastError != nil {
		p.raw(`<dt>last error</dt><dd class=why>`)
		p.text(str(b.LastError))
		if b.LastErrorAt != nil {
			p.raw(` (`)
			p.time(*b.LastErrorAt)
			p.raw(`)`)
		}
		p.raw(`</dd>`)
	}
	p.raw(`</dl></section>`)
}

func (p *writer) uplink(u *Uplink) {
	well := true
	for _, up := range u.Upstreams {
		well = well && up.State != "down"
	}
	p.raw(`<section class="uplink` + fine(well) + `" id=uplink><h2>Upstreams</h2><p class=meta>selector `)
	p.text(u.Selector)
	p.raw(` · ` + utoa(u.Delivered) + ` delivered, ` + utoa(u.Retried) + ` retried, ` + utoa(u.DeadLettered) + ` dead-lettered · share over `)
	if u.ShareWindowSeconds > 0 {
		p.raw(`the last ` + ageText(u.ShareWindowSeconds))
	} else {
		p.raw(`the whole run`)
	}
	p.raw(`</p><table><tr><th>upstream</th><th>state</th><th>share</th><th>latency</th><th>failures</th></tr>`)
	for _, up := range u.Upstreams {
		p.raw(`<tr class="` + fine(up.State != "down") + `" data-upstream="`)
		p.text(up.Name)
		p.raw(`"><th>`)
		p.url(up.Name)
		p.raw(`</th><td>`)
		p.pill(up.State)
		p.raw(`</td><td><span class=n>`)
		if up.Share != nil {
			p.raw(percent(*up.Share))
		} else {
			p.raw(`—`)
		}
		p.raw(`</span></td><td><span class=n>`)
		if up.LatencySeconds != nil {
			p.raw(dur(*up.LatencySeconds))
		} else {
			p.raw(`—`)
		}
		p.raw(`</span></td><td>`)
		switch {
		case up.LastFailure != nil:
			if up.ConsecutiveFailures > 0 {
				p.raw(utoa(up.ConsecutiveFailures) + ` in a row; `)
			}
			p.raw(`last `)
			if up.LastFailureTimeout {
				p.raw(`(a timeout) `)
			}
			p.time(*up.LastFailure)
		case up.LastError != nil:
			p.raw(`no delivery failed`)
		default:
			p.raw(`none`)
		}
		p.raw(`</td></tr>`)
		// The last error in words, on its own row: a phone's width is
		// too narrow for it beside the figures.
		if up.LastError != nil {
			cls := "meta"
			if up.State == "down" {
				cls = "why"
			}
			p.raw(`<tr class="uperr` + fine(up.State != "down") + `" data-upstream="`)
			p.text(up.Name)
			p.raw(`"><td colspan=5 class=` + cls + `>last error: `)
			p.text(*up.LastError)
			if up.LastErrorAt != nil {
				p.raw(` (`)
				p.time(*up.LastErrorAt)
				p.raw(`)`)
			}
			p.raw(`</td></tr>`)
		}
	}
	p.raw(`</table></section>`)
}

func (p *writer) downlink(d *Downlink) {
	p.raw(`<section class="downlink` + fine(!d.Unsigned) + `" id=downlink><h2>Downlink `)
	if d.Enabled {
		p.pill("up")
	} else {
		p.raw(`<b class=pill>disabled</b>`)
	}
	p.raw(`</h2>`)
	if d.Unsigned {
		p.raw(`<p class=why>` + unsignedWords + `</p>`)
	}
	if len(d.Commands) == 0 {
		p.raw(`<p class=meta>no command received</p>`)
	} else {
		p.raw(`<table><tr><th>when</th><th>device</th><th>command</th><th>result</th></tr>`)
		for _, c := range d.Commands {
			p.raw(`<tr><td>`)
			p.time(c.At)
			p.raw(`</td><td>`)
			p.name(c.Device)
			p.raw(`</td><td>`)
			p.text(c.Command)
			p.raw(`</td><td>`)
			if c.OK {
				p.pill("ok")
			} else {
				p.pill("bad")
			}
			p.raw(` `)
			p.text(c.Result)
			p.raw(`</td></tr>`)
		}
		p.raw(`</table>`)
	}
	p.raw(`</section>`)
}

func (p *writer) site(s *Snapshot) {
	st := s.Site
	well := s.Clock.Problem == nil && !st.Config.Changed && (st.LastReload == nil || st.LastReload.Applied)
	p.raw(`<section class="site` + fine(well) + `" id=site><h2>Gateway</h2><dl><dt>site</dt><dd>`)
	p.text(st.ID)
	p.raw(`</dd><dt>gateway</dt><dd>`)
	p.text(st.Gateway)
	p.raw(`</dd><dt>version</dt><dd>`)
	if st.Version == "" {
		st.Version = "unknown"
	}
	p.text(st.Version)
	p.raw(`</dd>`)
	if !st.Started.IsZero() {
		p.raw(`<dt>up</dt><dd>` + ageText(st.UptimeSeconds) + `, since `)
		p.time(st.Started)
		p.raw(`</dd>`)
	}
	p.raw(`<dt>site file</dt><dd>`)
	p.text(st.Config.File)
	if st.Config.SHA256 != "" {
		p.raw(` <span class=hash title="SHA-256 `)
		p.text(st.Config.SHA256)
		p.raw(`">sha256 `)
		p.text(st.Config.SHA256[:min(12, len(st.Config.SHA256))])
		p.raw(`</span>`)
	}
	switch {
	case st.Config.Changed:
		p.raw(`; <span class=why>changed on disk (sha256 `)
		p.text(str(st.Config.OnDiskSHA256)[:min(12, len(str(st.Config.OnDiskSHA256)))])
		p.raw(`), not in force</span>`)
	case st.Config.OnDiskError != nil:
		p.raw(`; <span class=why>`)
		p.text(str(st.Config.OnDiskError))
		p.raw(`</span>`)
	}
	p.raw(`</dd><dt>last reload</dt><dd>`)
	switch r := st.LastReload; {
	case r == nil:
		p.raw(`none since the start`)
	case r.Applied:
		p.raw(`applied `)
		p.time(r.At)
	default:
		p.raw(`<span class=why>refused `)
		p.time(r.At)
		p.raw(`: `)
		p.text(str(r.Error))
		p.raw(`</span>`)
	}
	if r := st.Remote; r != nil {
		p.raw(`</dd><dt>remote config</dt><dd>`)
		if r.State == "reverted" || r.State == "refused" {
			p.raw(`<span class=why>`)
		} else {
			p.raw(`<span>`)
		}
		p.text("bundle " + strconv.FormatUint(r.Serial, 10) + " " + r.State + " ")
		p.time(r.At)
		if r.Reason != nil {
			p.raw(`: `)
			p.text(str(r.Reason))
		}
		p.raw(`</span>`)
	}
	p.raw(`</dd><dt>clock</dt><dd>`)
	p.time(s.Clock.Now)
	switch c := s.Clock; {
	case c.Problem != nil:
		p.raw(` <span class=why>`)
		p.text(str(c.Problem))
		p.raw(`</span>`)
	case c.Synchronised != nil:
		p.raw(` · synchronised (NTP), within ` + dur(*c.MaxErrorSecond))
	default:
		p.raw(` · synchronisation unknown`)
	}
	p.raw(`</dd></dl></section>`)
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
