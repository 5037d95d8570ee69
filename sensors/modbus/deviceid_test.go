package modbus

import (
	"context"
	"strings"
	"testing"
)

// checkPymodbusDeviceID reads the identification pymodbus_server.py gives.
func checkPymodbusDeviceID(t *testing.T, c *Client) {
	t.Helper()
	id, err := c.ReadDeviceID(context.Background(), 1)
	if err != nil {
		t.Fatalf("read device identification: %v", err)
	}
	if id.Vendor() != "fieldlink-test" || id.Product() != "PM-1" || id[ObjectMajorMinorRevision] != "3.0" || id.Model() != "pymodbus test slave" {
		t.Fatalf("device identification %q", id)
	}
}

func TestParseDeviceID(t *testing.T) {
	// MEI 14, read code 2, conformity 0x82, no more, next 0, 2 objects.
	good := []byte{0x0E, 2, 0x82, 0, 0, 2, 0, 3, 'A', 'c', 'm', 1, 2, 'X', '1'}
	for _, tc := range []struct {
		name string
		b    []byte
		want string // "" for no error
	}{
		{"two objects", good, ""},
		{"cut in an object", good[:len(good)-1], "object 2 of 2 cut short"},
		{"bytes after the last object", append(append([]byte(nil), good...), 9), "1 bytes after the last object"},
		{"not MEI 14", []byte{0x0D, 2, 0x82, 0, 0, 0}, "not MEI 14"},
		{"too short", []byte{0x0E, 2}, "too short"},
	} {
		id := DeviceID{}
		_, _, err := parseDeviceID(tc.b, id)
		switch {
		case tc.want == "" && err != nil:
			t.Errorf("%s: %v", tc.name, err)
		case tc.want == "" && (id.Vendor() != "Acm" || id.Product() != "X1"):
			t.Errorf("%s: %q", tc.name, id)
		case tc.want != "" && (err == nil || !strings.Contains(err.Error(), tc.want)):
			t.Errorf("%s: got %v, want %s", tc.name, err, tc.want)
		}
		if n := deviceIDLen(tc.b); tc.want == "" && n != len(tc.b) {
			t.Errorf("%s: deviceIDLen = %d, want %d", tc.name, n, len(tc.b))
		}
	}
	if n := deviceIDLen(good[:7]); n != 8 {
		t.Errorf("deviceIDLen of a reply cut in the first object's header = %d, want 8 (its id and length)", n)
	}
}
