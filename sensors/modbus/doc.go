// Package modbus is a Modbus master (client) that reads coils, discrete
// inputs, holding and input registers from field devices, and writes coils
// and holding registers of actuators, over three transports, chosen by URL
// (see [Open]):
//
//   - rtu: Modbus RTU on a serial line (RS-485 through a UART or a USB
//     adapter);
//   - tcp: Modbus TCP;
//   - rtuovertcp: RTU frames over a TCP socket, as the serial device servers
//     in mines forward them.
//
// PDUs, CRCs and the exception type come from github.com/goburrow/modbus;
// the RTU transport is this package's own, because a serial bus punishes
// sloppy timing:
//
//   - A reply is read by its expected length (address, function, byte count
//     or exception code, data, CRC; for Read Device Identification, object
//     by object) and judged as soon as it is complete, rather than after a
//     fixed sleep. No read waits past the request's
//     deadline.
//   - Before each request, stale input (a late reply to a request that timed
//     out, a garbage tail, noise) is discarded, so one bad frame cannot
//     poison the next request.
//   - The line is left silent for t3.5 ([Silence]) between frames.
//   - On Linux the 16 ms latency timer of USB serial adapters is lowered to
//     1 ms when permitted.
//
// RS-485 is half duplex, so a [Client] sends one request at a time, reads
// and writes alike; parallel polling needs more buses (or Modbus TCP and
// more Clients).
//
// Failures are wrapped sentinel errors ([ErrTimeout], [ErrCRC],
// [ErrShortFrame], [ErrUnexpectedReply]) or, for an exception reply, a
// *[gm.ModbusError] carrying the exception code, always with the slave,
// function, address and quantity in the message. [Client.Stats] counts
// them by kind.
//
// A failed write either never reached the wire ([ErrNotSent]) or left its
// outcome unknown (any other error but a Modbus exception reply): the
// request went out, but no valid reply said whether the slave executed
// it. A caller retries the first at will and reads the point back after
// the second.
//
// [gm.ModbusError]: https://pkg.go.dev/github.com/goburrow/modbus#ModbusError
package modbus
