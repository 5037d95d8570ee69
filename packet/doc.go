// Package packet builds the DataHead/DataBody JSON packets that the farm and
// mine platforms ingest, and reads them back.
//
// A packet from a rain gauge on a farm, as [Packet.AppendJSON] writes it (on
// one line; wrapped here):
//
//	{"DataHead":{"Date":"2020-01-01","Time":"20:00:00","FarmId":"001","DataType":"Rain",
//	  "GatewayId":"gw-01","DeviceId":"rain-1","Seq":42,"TS":"2020-01-01T12:00:00.000Z"},
//	 "DataBody":{"Temperature":"25","Humidity":"50","WindSpeed":"15","Light":"10",
//	  "isRain":"False","Rainfall":"0"}}
//
// # DataHead
//
// The keys come in a fixed order, so that the output is byte for byte what
// the platform's own example packets look like:
//
//   - Date (YYYY-MM-DD) and Time (HH:MM:SS): the reading time, [Packet.At],
//     in the site's time zone, [Packet.Loc]. These are the farm platform's
//     original fields and are kept exactly.
//   - the site id, under the key [Packet.IDField]: "FarmId" on a farm (the
//     default), "MineId" on a mine.
//   - DataType, GatewayId, DeviceId.
//   - Seq, a JSON number: the gateway's persistent, strictly increasing
//     sequence number. With GatewayId it lets the platform drop the duplicates
//     that at-least-once delivery produces.
//   - TS: the reading time in RFC 3339, UTC, to the millisecond, always
//     with three digits of fraction ("2026-11-29T08:00:00.317Z"); finer
//     parts are truncated. Any RFC 3339 reader takes it, and Decode also
//     reads the older form to the second ("2026-11-29T08:00:00Z"). The
//     milliseconds keep apart readings less than a second apart, which
//     Date and Time, to the second, do not.
//   - Epoch, only when set.
//   - "ClockUnsynced":"True", only when the reading time was read from a
//     clock the kernel did not hold as synchronised (see
//     [Packet.ClockUnsynced]): Date, Time and TS may then be far from the
//     truth (an hour behind, or 1970). The buffer re-stamps such packets
//     once the clock is set, in the same boot, and drops the mark; packets
//     of an earlier boot keep it and their time as read.
//   - "Alarm":"True" and "AlarmFields":["CH4","CO"], only for an alarm packet
//     (see [Packet.Alarm]).
//
// The head is the same in both value styles: the platform's own fields stay
// strings, Seq is always a number.
//
// # DataBody
//
// The body holds the measurements, in the order of [Packet.Fields] (not
// sorted). The [ValueStyle] (the site file's packet.values) decides how a [Value]
// is written:
//
//   - [Strings] (the default, the platform's habit): every value is a JSON
//     string: "25.3", "-4", and booleans as "True"/"False" (the platform
//     writes "isRain":"False"). NaN and infinities are "NaN", "+Inf", "-Inf".
//   - [Numbers]: numbers and booleans are JSON numbers and true/false; NaN and
//     infinities, which JSON cannot express as numbers, are null.
//
// Floats are written with a fixed number of decimals or in the shortest form
// that reads back as the same float64 (see [Float]), never with an exponent
// and never as "-0": a value that rounds to zero is written without a sign.
//
// # Strings
//
// Names and strings come from config files and sensors, so any Go string is
// escaped correctly: quotes, backslashes and control characters are escaped,
// invalid UTF-8 becomes U+FFFD, and U+2028/U+2029 are escaped, all as
// encoding/json does. Unlike encoding/json, '<', '>' and '&' are NOT escaped:
// the packets are never embedded in HTML, and the platform compares ids
// byte for byte.
//
// # Reading packets back
//
// [Decode] parses a packet, for tests and tools that need to look inside one
// (the buffer's export, the uplink's tests). It is not on the hot path and
// uses encoding/json.
package packet
