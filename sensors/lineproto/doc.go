// Package lineproto reads serial ASCII sensors: instruments that print one
// reading per line, such as an ultrasonic anemometer talking NMEA 0183
// ($WIMWV,120,R,002.10,M,A*3B) or a station printing comma-separated values.
//
// A profile's [profile.Line] says how a line becomes measurements: either a
// regular expression whose named groups hold the values, or a delimiter and
// the 0-based index of each value; an optional Match text that every
// relevant line contains (other lines are ignored); an optional NMEA
// checksum; and per field a type (number, string or bool), scale, offset,
// precision and alarm thresholds.
//
// [Parse] turns one line into packet fields. [Emit] does the reverse for
// the emulator. [Reader] splits a byte stream into lines with a bound on
// the line length, so a sensor that never sends a newline cannot make the
// gateway's memory grow. Opening and owning the serial port is the bus
// scheduler's job, not this package's.
//
// # Empty fields
//
// NMEA 0183 writes a missing value as an empty field, and some instruments
// do the same (a Gill WindSonic leaves the direction empty in calm air). A
// number or bool field whose text is empty, or whose regex group did not
// take part in the match, is left out of the result rather than reported
// as an error.
//
// # Concurrency
//
// Parse and Emit only read the profile and may be called from several
// goroutines at once. A Reader is for one goroutine.
package lineproto
