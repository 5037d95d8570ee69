package status

import "fieldlink/sensors"

// busCause is why every failing device of bus fails, in words, when it is
// one reason on the link itself (the address refuses connections or does
// not answer them, the serial port is missing, busy or not allowed) or
// when every one times out (nothing on the line answers); "" when the
// devices fail for different or other reasons.
func busCause(bus string, devs []sensors.DeviceStatus) string {
	for _, d := range devs {
		if d.Bus == bus && d.Port.Down() {
			return portCause(d.Port.Err)
		}
	}
	cause := ""
	for _, d := range devs {
		if d.Bus != bus || (d.Health != sensors.Degraded && d.Health != sensors.Offline) {
			continue
		}
		c := linkCause(d.Failure)
		if c == "" || (cause != "" && c != cause) {
			return nothingAnswers(bus, devs)
		}
		cause = c
	}
	return cause
}

// nothingAnswers is a bus's cause when every device on it times out,
// with what to check (the devices' hint, the same as the log's).
func nothingAnswers(bus string, devs []sensors.DeviceStatus) string {
	hint := ""
	for _, d := range devs {
		if d.Bus != bus || (d.Health != sensors.Degraded && d.Health != sensors.Offline) {
			continue
		}
		if d.Failure.Kind != sensors.FailTimeout {
			return ""
		}
		if hint == "" {
			hint = d.Failure.Hint
		}
	}
	if hint != "" {
		return "nothing on this line answers: " + hint
	}
	return "nothing on this line answers"
}

// failureWords says a failed poll in a technician's words, by its kind,
// and what to check; the device and its slave are not named again (the
// page shows the device). A failure without a kind (none recorded) is
// its error as the driver gave it.
func failureWords(d sensors.DeviceStatus) (what, check string) {
	f := d.Failure
	switch f.Kind {
	case sensors.FailTimeout:
		what = "no answer (timeout)"
	case sensors.FailCRC:
		what = "garbled replies (CRC error or cut short)"
	case sensors.FailReply:
		what = "replies to another request"
	case sensors.FailLineBusy:
		what = "the line is busy with bytes nobody asked for"
	case sensors.FailException:
		what = "the device refused the read: exception " + itoa(int(f.Exception)) + ", " + exceptionMeaning(f.Exception)
	case sensors.FailLink:
		if what = linkCause(f); what == "" {
			what = "the link failed: " + f.Detail
		}
	case sensors.FailOther:
		what = f.Detail
	default:
		what = d.LastError
	}
	return what, f.Hint
}

// exceptionMeaning is what a Modbus exception code means for the
// technician, and what to check.
func exceptionMeaning(code byte) string {
	switch code {
	case 1:
		return "illegal function: the device does not support this read (is its profile the device's model?)"
	case 2:
		return "illegal data address: the device has no such register (is its profile the device's model and firmware?)"
	case 3:
		return "illegal data value: the device refuses the read's size or value (check its profile)"
	case 4:
		return "device failure: the device reports an internal fault"
	case 5, 7:
		return "acknowledged, not done: the device is busy with a long task"
	case 6:
		return "device busy: it will answer later"
	case 8:
		return "memory parity error in the device"
	case 10:
		return "gateway path unavailable: the Modbus gateway has no route to this slave (check its configuration)"
	case 11:
		return "the Modbus gateway got no answer from this slave (check the wiring and power behind the gateway, and the slave id)"
	}
	return "an exception code the Modbus standard does not define"
}

// portCause says in words why a serial port does not open, by its kind
// (as the system said it, see [sensors.PortError]), and what to check.
func portCause(pe *sensors.PortError) string {
	return pe.Advice()
}

// linkCause says in words why a network link does not connect, by the
// kind its failure carries (see [sensors.LinkKind]); "" for any other
// failure.
func linkCause(f sensors.Failure) string {
	if f.Kind != sensors.FailLink {
		return ""
	}
	switch f.Link {
	case sensors.LinkRefused:
		return f.Addr + " refuses connections: nothing listens there (the Modbus gateway is off or restarting, or the address is wrong)"
	case sensors.LinkNoAnswer:
		return f.Addr + " does not answer connections (the network or the Modbus gateway is down, or the address is wrong)"
	case sensors.LinkUnreachable:
		return "no route to " + f.Addr + " (the network is down, or the address is wrong)"
	case sensors.LinkDNS:
		return "the name " + f.Addr + " does not resolve (check the address, and the gateway's DNS)"
	}
	return ""
}
