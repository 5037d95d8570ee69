// Package status is the gateway's status page for the technician on site:
// live readings with their quality, device and bus health, the buffer and
// the upstreams, the site's identity, configuration and clock, on a phone,
// with no network beyond the gateway. /status.json serves the same
// snapshot as one JSON document.
//
// The page and the JSON are built from [Sources], the snapshot functions
// the agent also makes the Prometheus collectors of: a view costs a few
// mutex-protected copies and one read-only bbolt transaction, and nothing
// runs between views. The metrics listener mounts [Server.Pages] beside
// /metrics (see [metrics.NewHandler]), which keeps them read-only and asks
// LAN clients for a token.
//
// # Choices
//
// A point is never shown as a number it may not hold: only a good point
// has a value; a stale or bad one shows its quality in the value's place,
// and its last reading only beside the raw registers, marked "last read".
// In the JSON, value is null for them and the last reading is last_value.
//
// The page is written by hand (html.EscapeString on every text from the
// sources) rather than by html/template, which would add to a field binary
// that must stay under 10 MiB. Its style and script are inlined and
// allowed by hash in its Content-Security-Policy, so it loads nothing else
// and runs nothing else. The script refreshes the page's body every 5 s
// (fetching it server-rendered, so there is one renderer), keeps the
// filters in the URL, and says so when the gateway stops answering rather
// than leave old figures looking current. Without JavaScript the page
// reloads itself every 10 s.
//
// A bus's utilisation and an upstream's share of the deliveries are rates
// over the last minute, from counters sampled as the page is viewed (see
// window.go); before a minute of views they are taken since the start.
package status
