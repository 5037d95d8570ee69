package status

import (
	"strings"

	"fieldlink/internal/words"
	uplinkmqtt "fieldlink/uplink/mqtt"
)

func (p *writer) summary(s *Snapshot) {
	sum := s.Summary
	problems := sum.DevicesNotOK + sum.PointsNotGood + sum.UpstreamsDown + sum.PointsInAlarm
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
		if sum.UpstreamsFailing > 0 {
			p.raw(` (` + itoa(sum.UpstreamsFailing) + ` failing)`)
		}
	}
	if s.Buffer != nil {
		p.raw(` · ` + words.Count(s.Buffer.Waiting, "packet") + ` waiting`)
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
		if !upstreamWell(u.State) {
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

// alerts are what a technician must know before anything else: a reload
// refused, a clock that cannot be trusted, a site file not in force, a
// downlink open to anyone on the broker.
func (p *writer) alerts(s *Snapshot) {
	var msgs []string
	refused := s.Site.LastReload != nil && !s.Site.LastReload.Applied
	if refused {
		msgs = append(msgs, "The last reload was refused; the previous configuration stays in force. Fix the site file (gateway check -c "+
			s.Site.Config.File+" shows every error), then reload again:\n"+str(s.Site.LastReload.Error))
	}
	if s.Clock.Problem != nil {
		msgs = append(msgs, "Clock: "+*s.Clock.Problem+".")
	}
	if s.Site.Config.Changed && !refused {
		msgs = append(msgs, "The site file on disk differs from the one in force: reload it (systemctl reload fieldlink), or check it with gateway check.")
	}
	for _, u := range s.Uplink.upstreams() {
		if u.LastError != nil && strings.HasPrefix(*u.LastError, uplinkmqtt.ErrClientIDInUse.Error()) &&
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
		p.lines(m)
		p.raw(`</p>`)
	}
	p.raw(`</section>`)
}
