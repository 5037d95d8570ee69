// Package emulator serves emulated Modbus slave devices built from firmware
// profiles: the devices that the gateway's tests, its benchmarks and
// `gateway demo` poll instead of hardware.
//
// One [Emulator] holds any number of devices, each a slave id with a
// [profile.Profile] and optional [Faults]. It serves them on Modbus TCP
// ([Emulator.ServeTCP]), RTU frames over TCP ([Emulator.ServeRTUOverTCP]) and
// a serial line ([Emulator.ServeRTU], with [OpenSerial] for a real port or a
// socat pty), several at once.
//
// # As a device behaves
//
// Function codes 1–4 read the profile's four tables and 5, 6, 15 and 16
// write them (a written value is read back until the emulator stops).
// Addresses inside a device's span that no register covers read as 0, so a
// master may merge reads across gaps; a read touching a profile hole, or
// beyond the last register (past the next multiple of 16), gets exception 2;
// a function the device lacks gets exception 1. Read Device
// Identification (43/14) answers for a profile that names its
// manufacturer (vendor name, product code = the model up to its first
// parenthesis, revision V1.0, model name); a generic profile's device
// lacks it. A request for a slave id
// that is not emulated, and any broadcast, gets no reply at all, as on a
// real bus (a broadcast write is executed by every device).
//
// [Faults] make a device misbehave: requests dropped, replies with a bad
// CRC, exceptions, a slow turnaround; and for writes, refusal (exception
// 3), clamping of the stored value, a reply withheld after the write took
// effect, or a reply sent late. [Options.OnRequest] shows a test the bytes
// a master sent, and [Emulator.Written] what a device stored.
//
// On a serial line replies are timed as on RS-485 at the given baud rate
// (request and reply wire time, t3.5, turnaround), so that a pty, which
// moves bytes instantly, behaves like a bus and poll-cycle measurements mean
// something.
//
// # Values
//
// Each register's value comes from a model computed from the clock at every
// request, so a fixed clock serves fixed values and [Emulator.Values] can
// say what was served at any time. The register's emulate block picks the
// model: diurnal (daily swing between min and max, highest at 15:00 in the
// clock's location), gust (wind: a slowly varying mean with gusts), rain
// (dry spells and showers of min..max per hour; with counter, a
// tipping-bucket total in 0.2 steps that only grows, from midnight UTC of
// the day the emulator started), drift (a gas sensor: slow drift in the low
// part of min..max, with one-minute spikes towards max at the chance per
// minute given by spike), walk (bounded random walk), constant (min) and
// angle (wrapping over 0–360). Without an emulate block the model is
// inferred from the register's name and unit (Temperature swings daily,
// WindSpeed gusts, CH4 drifts with rare alarms) or is a walk over 0..100.
//
// The models are pure functions of the seed, the slave, the register name
// and the time, made of hashed value noise, so runs with the same
// [Options.Seed] and clock are identical.
package emulator
