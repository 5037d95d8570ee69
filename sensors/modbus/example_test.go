package modbus_test

import (
	"context"
	"encoding/binary"
	"errors"
	"fmt"
	"log"
	"time"

	gm "github.com/goburrow/modbus"

	"fieldlink/sensors/modbus"
)

func ExampleOpen() {
	c, err := modbus.Open("rtu:///dev/ttyUSB0?baud=19200&parity=E", modbus.Options{Timeout: 500 * time.Millisecond})
	if err != nil {
		log.Fatal(err) // names the port: "modbus: open serial port /dev/ttyUSB0 at 19200 8E1: ..."
	}
	defer c.Close()

	// Ten holding registers of slave 7, from address 100.
	data, err := c.Read(context.Background(), 7, 3, 100, 10)
	var exc *gm.ModbusError
	switch {
	case errors.As(err, &exc):
		fmt.Println("device refused:", exc.ExceptionCode) // 2: address not mapped
	case errors.Is(err, modbus.ErrTimeout):
		fmt.Println("no reply: device off, wrong address or cable cut")
	case err != nil:
		fmt.Println(err)
	default:
		fmt.Println("first register:", binary.BigEndian.Uint16(data))
	}
}
