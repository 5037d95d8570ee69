package status

import "fieldlink/internal/words"

func (p *writer) bus(b Bus) {
	p.raw(plural(b.Devices, "device") + ` · ` + words.Count(b.Requests, "request") + ` · errors: `)
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
	p.raw(` · ` + words.Count(d.Polls, "poll") + `, ` + utoa(d.Errors) + ` failed</p>`)
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
	p.raw(fine(pt.Quality == "good" && !pt.Alarm) + `" data-point="`)
	p.text(pt.Name)
	p.raw(`" data-quality="`)
	p.text(pt.Quality)
	p.raw(`"><th>`)
	p.name(pt.Name)
	if pt.Alarm {
		p.raw(`</th><td class="v alarm">`)
	} else {
		p.raw(`</th><td class=v>`)
	}
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
