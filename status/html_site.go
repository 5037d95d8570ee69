package status

import (
	"strconv"
)

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
		p.raw(`:<br>`)
		p.lines(str(r.Error))
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
			p.textTimes(str(r.Reason))
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
