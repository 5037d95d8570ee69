package modbus

import (
	"bytes"
	"context"
	"encoding/binary"
	"errors"
	"slices"
	"syscall"
	"testing"
	"time"

	gm "github.com/goburrow/modbus"

	"fieldlink/internal/testtool"
)

// These tests run against pymodbus (testdata/pymodbus_server.py), a Modbus
// implementation nobody here wrote. They skip when it is missing, and fail
// under CI=true.

// pyModel is the register map pymodbus_server.py serves.
func pyModel(slave, fc byte, addr, qty uint16) []byte {
	switch fc {
	case 1, 2:
		out := make([]byte, (int(qty)+7)/8)
		for i := range int(qty) {
			a := int(addr) + i
			if (fc == 1 && a%3 == 0) || (fc == 2 && a%2 == 1) {
				out[i/8] |= 1 << (i % 8)
			}
		}
		return out
	default:
		base := 1000 * uint16(slave)
		if fc == 4 {
			base += 500
		}
		out := make([]byte, 2*int(qty))
		for i := range int(qty) {
			binary.BigEndian.PutUint16(out[2*i:], base+addr+uint16(i))
		}
		return out
	}
}

// checkPymodbusReads runs the reads both transports must get right.
func checkPymodbusReads(t *testing.T, c *Client) {
	t.Helper()
	reads := []struct {
		slave, fc byte
		addr, qty uint16
	}{
		{1, 3, 0, 10},
		{2, 3, 90, 10},
		{1, 3, 0, 100},
		{1, 4, 5, 95},
		{2, 4, 0, 1},
		{1, 1, 0, 100},
		{1, 1, 7, 9},
		{2, 2, 3, 17},
		{1, 2, 0, 1},
	}
	for _, r := range reads {
		got, err := c.Read(context.Background(), r.slave, r.fc, r.addr, r.qty)
		if err != nil {
			t.Fatalf("slave %d fc %d addr %d qty %d: %v", r.slave, r.fc, r.addr, r.qty, err)
		}
		if want := pyModel(r.slave, r.fc, r.addr, r.qty); !bytes.Equal(got, want) {
			t.Fatalf("slave %d fc %d addr %d qty %d:\n got % x\nwant % x", r.slave, r.fc, r.addr, r.qty, got, want)
		}
	}
	for _, r := range []struct {
		fc        byte
		addr, qty uint16
	}{{3, 100, 1}, {3, 95, 10}, {4, 1000, 2}, {1, 200, 8}} {
		_, err := c.Read(context.Background(), 1, r.fc, r.addr, r.qty)
		var me *gm.ModbusError
		if !errors.As(err, &me) || me.ExceptionCode != gm.ExceptionCodeIllegalDataAddress {
			t.Fatalf("unmapped fc %d addr %d qty %d: got %v, want exception 2", r.fc, r.addr, r.qty, err)
		}
	}
	if _, err := c.Read(context.Background(), 1, 3, 0, 1); err != nil {
		t.Fatalf("after exceptions: %v", err)
	}
}

// pyWord is a holding register of pymodbus_server.py's map, as on the wire.
func pyWord(slave byte, addr uint16) []byte { return pyModel(slave, 3, addr, 1) }

// checkPymodbusWrites writes with every function, compares what is read
// back byte for byte, and checks that the neighbours of each write kept
// their values. On a serial line it also broadcasts. It returns how many
// writes were sent.
func checkPymodbusWrites(t *testing.T, c *Client, serialLine bool) (writes int) {
	t.Helper()
	ctx := context.Background()
	write := func(slave, fc byte, addr, qty uint16, data []byte) {
		t.Helper()
		writes++
		if err := c.Write(ctx, slave, fc, addr, qty, data); err != nil {
			t.Fatalf("write slave %d fc %d addr %d qty %d % x: %v", slave, fc, addr, qty, data, err)
		}
	}
	read := func(slave, fc byte, addr, qty uint16, want []byte) {
		t.Helper()
		got, err := c.Read(ctx, slave, fc, addr, qty)
		if err != nil {
			t.Fatalf("read back slave %d fc %d addr %d qty %d: %v", slave, fc, addr, qty, err)
		}
		if !bytes.Equal(got, want) {
			t.Fatalf("read back slave %d fc %d addr %d qty %d:\n got % x\nwant % x", slave, fc, addr, qty, got, want)
		}
	}

	// fc 5: coil 9 (on in the map) off, coil 10 (off) on. Coils 8..11
	// were 0010, LSB first; now 0100.
	read(1, 1, 8, 4, []byte{0b0010})
	write(1, 5, 9, 1, []byte{0x00, 0x00})
	write(1, 5, 10, 1, []byte{0xFF, 0x00})
	read(1, 1, 8, 4, []byte{0b0100})

	// fc 6, on slave 2: only that slave's register changes.
	write(2, 6, 20, 1, []byte{0xBE, 0xEF})
	read(2, 3, 19, 3, slices.Concat(pyWord(2, 19), []byte{0xBE, 0xEF}, pyWord(2, 21)))
	read(1, 3, 20, 1, pyWord(1, 20))

	// fc 15: 13 coils from 30, with the 3 unused bits of the last byte 0.
	coils := []byte{0b1010_0101, 0b0_1011}
	write(1, 15, 30, 13, coils)
	read(1, 1, 30, 13, coils)
	read(1, 1, 43, 2, pyModel(1, 1, 43, 2))

	// fc 16: two int32 in CDAB word order (-123456 and 0x12345678).
	words := []byte{0x1D, 0xC0, 0xFF, 0xFE, 0x56, 0x78, 0x12, 0x34}
	write(1, 16, 50, 4, words)
	read(1, 3, 49, 6, slices.Concat(pyWord(1, 49), words, pyWord(1, 54)))

	// Refusals are settled; nothing was written.
	for _, w := range []struct {
		fc        byte
		addr, qty uint16
		data      []byte
	}{{6, 100, 1, []byte{0, 1}}, {16, 98, 3, make([]byte, 6)}} {
		writes++
		err := c.Write(ctx, 1, w.fc, w.addr, w.qty, w.data)
		var me *gm.ModbusError
		if !errors.As(err, &me) || me.ExceptionCode != gm.ExceptionCodeIllegalDataAddress || unsettled(err) {
			t.Fatalf("write fc %d addr %d qty %d past the map: %v, want a settled exception 2", w.fc, w.addr, w.qty, err)
		}
	}
	read(1, 3, 98, 2, pyModel(1, 3, 98, 2))

	if serialLine {
		write(0, 6, 60, 1, []byte{0x07, 0x77})
		read(1, 3, 60, 1, []byte{0x07, 0x77})
		read(2, 3, 60, 1, []byte{0x07, 0x77})
	}
	return writes
}

func TestPymodbusRTU(t *testing.T) {
	testtool.RequirePython(t, "pymodbus", "python3-pymodbus")
	testtool.RequirePython(t, "serial_asyncio", "python3-serial-asyncio")
	ours, theirs := testtool.PtyPair(t)
	srv := testtool.StartPymodbus(t, "testdata/pymodbus_server.py", "--rtu", theirs, "--baud", "19200")
	const timeout = 300 * time.Millisecond
	c, err := Open("rtu://"+ours+"?baud=19200", Options{Timeout: timeout, Logger: testtool.Logger(t)})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = c.Close() })

	checkPymodbusReads(t, c)
	checkPymodbusDeviceID(t, c)
	writes := checkPymodbusWrites(t, c, true)

	// pymodbus ignores slave ids it does not serve, as a bus does.
	if _, err := c.Read(context.Background(), 3, 3, 0, 1); !errors.Is(err, ErrTimeout) {
		t.Fatalf("absent slave 3: got %v, want ErrTimeout", err)
	}
	if _, err := c.Read(context.Background(), 1, 3, 0, 1); err != nil {
		t.Fatalf("after a timeout: %v", err)
	}

	// The device dies; the line stays (socat keeps the pty open).
	srv.Kill()
	_, err = c.Read(context.Background(), 1, 3, 0, 1)
	if !errors.Is(err, ErrTimeout) {
		t.Fatalf("dead device: got %v, want ErrTimeout", err)
	}
	st := c.Stats()
	t.Logf("stats: %+v", st)
	// 4 exceptions come from the reads, 2 from the writes.
	if st.Timeouts != 2 || st.Exceptions != 6 || st.CRCErrors+st.FrameErrors+st.IOErrors != 0 {
		t.Errorf("stats %+v: want 2 timeouts, 6 exceptions and no other errors", st)
	}
	if st.Writes != uint64(writes) || st.Broadcasts != 1 {
		t.Errorf("stats %+v: want %d writes, 1 of them broadcast", st, writes)
	}
}

func TestPymodbusTCP(t *testing.T) {
	srv, addr := testtool.StartPymodbusTCP(t, "testdata/pymodbus_server.py")
	const timeout = 300 * time.Millisecond
	c, err := Open("tcp://"+addr, Options{Timeout: timeout, Logger: testtool.Logger(t)})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = c.Close() })

	checkPymodbusReads(t, c)
	checkPymodbusDeviceID(t, c)
	writes := checkPymodbusWrites(t, c, false)
	if st := c.Stats(); st.Writes != uint64(writes) || st.Broadcasts != 0 || st.Requests != st.Responses {
		t.Errorf("stats %+v: want %d writes, no broadcast, a response to every request", st, writes)
	}

	// The device dies: the open connection fails (reset or EOF; a timeout
	// at worst), then redialing is refused.
	srv.Kill()
	_, err = c.Read(context.Background(), 1, 3, 0, 1)
	if err == nil {
		t.Fatal("read from a killed server succeeded")
	}
	t.Logf("first read after kill: %v", err)
	for _, kind := range []error{ErrCRC, ErrShortFrame, ErrUnexpectedReply} {
		if errors.Is(err, kind) {
			t.Fatalf("first read after kill: %v", err)
		}
	}
	_, err = c.Read(context.Background(), 1, 3, 0, 1)
	if !errors.Is(err, syscall.ECONNREFUSED) {
		t.Fatalf("second read after kill: got %v, want a refused dial", err)
	}
}
