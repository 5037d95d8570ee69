// Package uplink moves packets from the gateway's durable buffer to its
// upstreams — MQTT brokers and HTTP(S) ingest endpoints — and deletes each
// packet from the buffer only once an upstream has acknowledged it: delivery
// is at least once.
//
// # The delivery path
//
// A [Delivery] runs one loop over a [Buffer]. The buffer leases
// records, alarms first: a leased record is not handed out again until it is
// acked or released, so a packet is in at most one send at a time.
//
// For each batch the loop asks a [selector.Strategy] to pick an upstream from
// the [selector.Table]'s statistics (latency, failures, load, requests in
// flight), skipping upstreams that are down, resting or whose window is full.
// Each upstream is a [Sender]: [fieldlink/uplink/mqtt]'s publishes one record per send at
// QoS 1 and succeeds on its PUBACK; [fieldlink/uplink/http.Sender] posts a batch as a JSON
// array and succeeds on a 2xx, the batch named by an
// Idempotency-Key so that the platform can drop a resend; with
// [EncodingInfluxLine] it writes the batch to InfluxDB as line protocol
// instead, where a point written twice is stored once.
//
// On success the records' sequence numbers go to an ack goroutine, which
// deletes them from the buffer in groups (one buffer write for whatever was
// delivered meanwhile). On failure the loop records it in the table (its
// statistics steer later picks), rests the upstream (100 ms after its
// first failure in a row, doubling up to [DeliveryOptions.Backoff]) and tries
// the batch on another upstream, up to [DeliveryOptions.Attempts]; when none
// can take it, the records are released to the buffer and the loop backs off.
// An outage costs nothing but time: the packets wait in the buffer.
//
// # Refused packets and dead letters
//
// An upstream may refuse the packets themselves rather than fail: for HTTP a
// 400, 413 or 422 answer, or a packet that is not JSON (the one rule is on
// [fieldlink/uplink/http.Sender.Send]; a 401, 403, 404 or 5xx is the upstream's failure, and the
// records stay buffered until it is fixed). For MQTT, a packet whose topic
// cannot be made. The loop then resends the batch one record at a time on the
// same upstream, so that one poison packet does not take its neighbours with
// it, and hands each record refused alone to [DeadLetters], out of the buffer.
//
// # Probes, load reports and the upstream list
//
// A [Prober] measures each upstream's round trip on an interval; the gateway
// hands its results to [selector.Table.Probe] and, for HTTP, to
// [fieldlink/uplink/http.Sender.ProbeResult],
// which marks the upstream up or down (an MQTT sender is up while connected,
// and its connection reconnects at once when a probe answers again). Servers
// report their load on a retained MQTT topic ([UpstreamConfig.LoadTopic]) or an HTTP
// endpoint (polled by the pool), read as a [selector.Load] into
// [selector.Table.Report].
// A [Pool] owns the upstreams and what runs for each (publisher, probe, load
// source): it registers each in the table and the delivery loop, knows each by
// its credential-free name ([UpstreamName]), and closes them at Stop. A
// [Registry] may serve the list of upstreams itself; [Pool.Reconcile] keeps the
// pool in step with it (new names connected, weights applied, dropped names
// retired after [RetireGrace]), and [SaveRegistryList] keeps its last good
// answer for a restart without network.
//
// # Kinds of upstream
//
// What is particular to a kind of upstream lives in its own package, which
// implements [Kind] and is registered by [Register] with the schemes and
// encodings it serves: fieldlink/uplink/mqtt (MQTT brokers),
// fieldlink/uplink/sparkplug (Sparkplug B edge nodes, on the MQTT kind's
// connection) and fieldlink/uplink/http (HTTP, and InfluxDB's line
// protocol). A new kind is a folder under uplink/ and one line of the
// table. The table of fieldlink/uplink/kinds registers every kind; a
// program imports it. The pool opens each upstream through its kind
// ([Open]), and [Explain] asks the kind first for its errors' words. A
// kind also checks the site file's settings it owns, on every upstream
// (a CheckSite method taking fieldlink/uplink/site's Upstream and the File
// to report to), which the site file's loader has [CheckSite] call for
// each registered kind.
//
// # Window and Retry-After
//
// Each sender's window bounds its sends in flight; the loop keeps the
// window of every upstream that takes records full, so a backlog drains over all of them in
// parallel. An HTTP upstream that answers 429 or 503 with Retry-After is sent
// nothing before that time has passed, at most 5 minutes: a longer wait is
// more likely a server's mistake than a plan, and the records are safe in the
// buffer meanwhile.
//
// # Shutdown
//
// When the context of [Delivery.Run] ends, the loop leases nothing more and
// starts no send; the sends in flight run to their own end (each publisher
// bounds them: the MQTT kind its publish timeout, http.Config.Timeout), and Run returns
// once each of their batches is acked, dead-lettered or back in the buffer.
// When its own context ends, an MQTT upstream's Run publishes a retained "offline" and
// disconnects.
package uplink
