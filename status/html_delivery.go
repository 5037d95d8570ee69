package status

import (
	"fieldlink/internal/words"
	"strings"
	"time"
)

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
		p.raw(`<dt>in memory</dt><dd>` + words.Count(b.Volatile, "packet") + `, not durable</dd>`)
	}
	p.raw(`<dt>waiting</dt><dd>` + words.Count(b.Waiting, "packet") + ` (` + words.Count(b.Alarms, "alarm") + `), ` + itoa(b.Leased) + ` being sent</dd>`)
	p.raw(`<dt>oldest</dt><dd>`)
	if b.OldestAgeSeconds != nil {
		p.raw(ageText(*b.OldestAgeSeconds) + ` old`)
	} else {
		p.raw(`none waiting`)
	}
	p.raw(`</dd><dt>size</dt><dd>` + size(uint64(b.Bytes)) + ` of ` + size(uint64(b.MaxBytes)) + ` (file ` + size(uint64(b.FileSize)) + `)</dd>`)
	p.raw(`<dt>evicted</dt><dd>` + words.Count(b.Evicted, "packet") + `, ` + utoa(b.Rejected) + ` refused when full, ` + words.Count(b.DeadLetters, "dead letter") + `</dd>`)
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
		well = well && upstreamWell(up.State)
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
		p.raw(`<tr class="` + fine(upstreamWell(up.State)) + `" data-upstream="`)
		p.text(up.Name)
		p.raw(`"><th>`)
		p.url(up.Name)
		p.raw(`</th><td>`)
		p.pill(up.State)
		p.raw(`</td><td><span class=n>`)
		// A share of the window's deliveries is no figure for an upstream
		// that does not deliver now.
		if up.Share != nil && upstreamWell(up.State) {
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
		if up.DownSince != nil {
			p.raw(up.State + ` since `)
			p.since(*up.DownSince)
			if up.LastFailure != nil {
				p.raw(`; `)
			}
		}
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
		case up.DownSince != nil:
		case up.LastError != nil && upstreamWell(up.State):
			p.raw(`no delivery failed`)
		case up.LastError != nil:
			p.raw(`no delivery tried`)
		default:
			p.raw(`none`)
		}
		p.raw(`</td></tr>`)
		// The last error in words, on its own row: a phone's width is
		// too narrow for it beside the figures.
		if up.LastError != nil {
			cls := "meta"
			if !upstreamWell(up.State) {
				cls = "why"
			}
			p.raw(`<tr class="uperr` + fine(upstreamWell(up.State)) + `" data-upstream="`)
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

// upstreamWell reports whether an upstream in state needs no look: up or
// retired; down and failing do.
func upstreamWell(state string) bool { return state == "up" || state == "retired" }

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
			p.command(c.Command)
			p.raw(`</td><td>`)
			if c.OK {
				p.pill("ok")
			} else {
				p.pill("bad")
			}
			p.raw(` `)
			p.textTimes(c.Result)
			p.raw(`</td></tr>`)
		}
		p.raw(`</table>`)
	}
	p.raw(`</section>`)
}

// command writes a command as the downlink tells it, "Open = true
// (cmd-0042)": its id, in parentheses at the end, never breaks (at its
// hyphens) across lines.
func (p *writer) command(c string) {
	i := strings.LastIndex(c, "(")
	if i < 0 || !strings.HasSuffix(c, ")") || (i > 0 && c[i-1] != ' ') {
		p.text(c)
		return
	}
	p.text(c[:i])
	p.raw(`<span class=id>`)
	p.text(c[i:])
	p.raw(`</span>`)
}
