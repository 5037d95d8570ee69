package modbus

import (
	"context"
	"fmt"
)

// Read Device Identification: function 43 (encapsulated interface
// transport) with MEI type 14.
const (
	fcMEI       = 0x2B
	meiDeviceID = 0x0E
)

// Device identification object ids (Modbus application protocol v1.1b3,
// 6.21): the basic category (mandatory for a device that answers at all)
// and the regular one.
const (
	ObjectVendorName         = 0x00
	ObjectProductCode        = 0x01
	ObjectMajorMinorRevision = 0x02
	ObjectVendorURL          = 0x03
	ObjectProductName        = 0x04
	ObjectModelName          = 0x05
	ObjectUserAppName        = 0x06
)

// DeviceID is what a device says of itself, by object id.
type DeviceID map[byte]string

// Vendor is the vendor name (object 0).
func (d DeviceID) Vendor() string { return d[ObjectVendorName] }

// Product is the product code (object 1).
func (d DeviceID) Product() string { return d[ObjectProductCode] }

// Model is the model name (object 5), else the product name (object 4).
func (d DeviceID) Model() string {
	if m := d[ObjectModelName]; m != "" {
		return m
	}
	return d[ObjectProductName]
}

// ReadDeviceID asks slave for its identification (function 43/14), the
// regular category (objects 0 to 6), following "more follows" for a device
// that answers in several parts. A device that does not implement it
// answers an exception (a *[gm.ModbusError], usually code 1) or nothing.
func (c *Client) ReadDeviceID(ctx context.Context, slave byte) (DeviceID, error) {
	id := DeviceID{}
	next := byte(0)
	for range 8 { // the regular category is 7 objects: a few parts at most
		r := &request{slave: slave, fc: fcMEI, data: []byte{meiDeviceID, 2, next}}
		if c.serial && (slave < 1 || slave > 247) {
			return nil, notSent(fmt.Errorf("modbus: %s: slave id must be 1..247 on a serial line", r))
		}
		body, err := c.do(ctx, r)
		if err != nil {
			return nil, err
		}
		more, nextID, err := parseDeviceID(body, id)
		if err != nil {
			return nil, fmt.Errorf("%w: %s: %v", ErrUnexpectedReply, r, err)
		}
		if !more {
			return id, nil
		}
		next = nextID
	}
	return id, nil
}

// parseDeviceID reads a 43/14 reply after its function code: MEI type,
// read code, conformity level, more follows, next object id, number of
// objects, then each object's id, length and value. It adds the objects
// to id.
func parseDeviceID(b []byte, id DeviceID) (more bool, next byte, err error) {
	if len(b) < 6 || b[0] != meiDeviceID {
		return false, 0, fmt.Errorf("device identification reply too short or not MEI 14: % x", b)
	}
	more, next, n := b[3] == 0xFF, b[4], int(b[5])
	b = b[6:]
	for i := range n {
		if len(b) < 2 || len(b) < 2+int(b[1]) {
			return false, 0, fmt.Errorf("object %d of %d cut short", i+1, n)
		}
		id[b[0]] = string(b[2 : 2+int(b[1])])
		b = b[2+int(b[1]):]
	}
	if len(b) != 0 {
		return false, 0, fmt.Errorf("%d bytes after the last object", len(b))
	}
	return more, next, nil
}

// deviceIDLen returns the length of a 43/14 reply's PDU after the function
// code held in b so far, or need > len(b) when more bytes must be read to
// tell.
func deviceIDLen(b []byte) (need int) {
	if len(b) < 6 {
		return 6
	}
	at := 6
	for range int(b[5]) {
		if len(b) < at+2 {
			return at + 2
		}
		at += 2 + int(b[at+1])
	}
	return at
}
