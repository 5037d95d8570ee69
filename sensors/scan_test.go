package sensors_test

import (
	"context"
	"errors"
	"testing"
	"time"

	"fieldlink/internal/testtool/emutest"
	"fieldlink/sensors"
	"fieldlink/sensors/modbus"
	"fieldlink/sensors/profile"
)

// Scan finds the slaves that answer, with the register or with an
// exception, passes over the silent ids, and stops where ctx ends.
func TestScan(t *testing.T) {
	_, addr := emutest.Serve(t, false, "generic-mine-methane", "generic-wind-speed")
	c, err := modbus.Open("tcp://"+addr, modbus.Options{Timeout: 200 * time.Millisecond})
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	var told []byte
	res, _, err := sensors.Scan(context.Background(), c, []byte{3, 1, 4, 2}, profile.Holding, 0, func(a sensors.Answer) { told = append(told, a.Slave) })
	if err != nil {
		t.Fatal(err)
	}
	if len(res.Answers) != 2 || res.Answers[0].Slave != 1 || res.Answers[1].Slave != 2 || string(told) != "\x01\x02" {
		t.Fatalf("answers %+v, told %v: want slaves 1 and 2, in the order tried", res.Answers, told)
	}
	for _, a := range res.Answers {
		if a.Exception != nil {
			t.Errorf("slave %d: exception %v to a read of a register it has", a.Slave, a.Err)
		}
	}
	// A register no device has: both answer with an exception, and are
	// found all the same.
	res, _, err = sensors.Scan(context.Background(), c, []byte{1, 2}, profile.Holding, 60000, nil)
	if err != nil || len(res.Answers) != 2 || res.Answers[0].Exception == nil || res.Answers[1].Exception == nil {
		t.Fatalf("a missing register: %+v, %v; want two exception answers", res.Answers, err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	cancel()
	res, at, err := sensors.Scan(ctx, c, []byte{2, 1}, profile.Holding, 0, nil)
	if !errors.Is(err, context.Canceled) || at != 2 || len(res.Answers) != 0 {
		t.Errorf("cancelled: %+v at %d, %v; want none found, stopped at 2", res.Answers, at, err)
	}
}
