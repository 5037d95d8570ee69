// Package chaos is the gateway's chaos run: `gateway run` as a real
// process, on loopback, against the project's emulator and three real
// mosquitto brokers, while faults are injected at seeded random moments,
// and then an account of every packet.
//
// The package holds no library code; everything is in its test,
// TestChaos, which builds the gateway binary once and starts:
//
//   - the emulator (package sensors/emulator) on two Modbus TCP ports: five
//     devices polled every 100–250 ms on one bus, and a flaky wind vane
//     (a quarter of its requests unanswered, one in ten an exception) alone
//     on a second bus;
//   - three mosquitto brokers, each behind an in-process toxiproxy proxy,
//     and a subscriber connected straight to each broker that records every
//     packet it receives;
//   - an upstream registry (an HTTP server) that lists brokers B and C;
//     broker A is in the site file;
//   - the gateway, `gateway run -c site.yaml -print`, whose buffer lives on
//     a small tmpfs when the test runs as root.
//
// The faults, counted by kind: a broker's link down (outage1), two
// (outage2) or all three (outage3); a latency spike; a connection reset; a
// bandwidth squeeze; kill -9 of the gateway followed by a restart on the
// same buffer (kill9); the registry answering 503 or dropping connections
// (registry); the buffer's tmpfs filled to the last byte, kept full, then
// freed (diskfull).
//
// # What counts
//
// A packet is produced when the gateway printed it: with -print, `gateway
// run` writes a packet to stdout after the buffer's Append returned it
// stored (with durability always: committed and synced). An append that a
// full disk refused, or that a kill -9 interrupted before it returned, is
// not produced, even though it may have consumed a Seq. Packets a
// subscriber received, or that are still in the buffer, without having
// been printed (committed, then killed before the print) are counted as
// unconfirmed, not as produced.
//
// After the run every fault is healed, the gateway drains its backlog, is
// stopped with SIGTERM, and `gateway buffer export` lists what is left. A
// produced packet is missing when no subscriber received it and it is not
// in the buffer: the run fails on any.
//
// Duplicates are expected (QoS 1 is at least once) and bounded: see
// dupBound in the test for the derivation, and docs/chaos.md.
//
// # Running it
//
//	go test ./tests/chaos/                                      # short run (part of make test)
//	CI=true CHAOS_DURATION=10m go test -race -v -timeout 3h ./tests/chaos/   # long run (make chaos)
//	CHAOS_SEED=42 go test -v -run TestChaos ./tests/chaos/      # replay a run's fault schedule
//
// The test prints one line of figures (see docs/chaos.md). Under the race
// detector the gateway binary is built with -race too, and a data race it
// reports fails the run.
package chaos
