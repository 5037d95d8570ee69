// Package sparkplug is the uplink's Sparkplug B kind of upstream: the
// gateway as a Sparkplug B 3.0 edge node on an MQTT upstream whose
// encoding is sparkplug_b (docs/sparkplug.md). Each device of the site is
// a Sparkplug device; a packet goes out as a DDATA by alias, after the
// NBIRTH and DBIRTHs, with seq and bdSeq kept by the node; the NDEATH is
// the connection's will; NCMD rebirths, DCMDs ([Config.OnCommand]) and
// the primary host's STATE come in on the node's subscriptions; a node
// of several servers is on one at a time. The payloads are
// fieldlink/sparkplug's.
//
// # A kind of its own, on the MQTT connection
//
// [Kind] is an uplink.Kind like any other: fieldlink/uplink/kinds
// registers it for the mqtt and mqtts schemes and the sparkplug_b
// encoding, after the MQTT kind, which keeps those schemes' other
// encodings. So adding it was this folder and one line of that table,
// as for any kind, and the core, the pool and the MQTT kind know nothing
// of it. It does not dial a broker of its own: [Kind.Open] opens the
// MQTT kind's connection through fieldlink/uplink/mqtt.Open with a hook
// (the node's server, an mqtt.Hook) that gives the connection its
// NDEATH will, makes the node's subscriptions and births on each
// connect, publishes the NDEATH before a clean disconnect, and walks to
// the next server when one is lost. What the node needs of a connection
// once made is mqtt.Link's few methods: its client for the node's
// publishes and subscriptions, the wait for their tokens by the
// connection's rules, whether it is still the one up, and dropping it.
// A kind of its own, rather than an option of the MQTT kind, keeps the
// node's settings, checks, errors and tests in one folder; an extension
// registered inside the MQTT kind would have needed a second registry
// beside the one table.
//
// The site file's sparkplug settings are checked here ([Kind.CheckSite]);
// config keeps their YAML form, edge_node's default and the check that
// spans upstreams (the servers of one node name one primary host), since
// a kind's check sees one upstream at a time.
package sparkplug
