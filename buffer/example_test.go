package buffer_test

import (
	"context"
	"fmt"
	"os"
	"path/filepath"
	"time"

	"fieldlink/buffer"
	"fieldlink/packet"
)

// A packet is appended (durable when Append returns), leased for delivery
// with Lease, and deleted with Ack once an upstream acknowledged it. A
// packet never acknowledged stays in the file for the next start.
func ExampleOpen() {
	dir, _ := os.MkdirTemp("", "buffer-example")
	defer os.RemoveAll(dir)
	b, err := buffer.Open(filepath.Join(dir, "buffer.db"), buffer.Options{}) // the zero Options: durable, unbounded
	if err != nil {
		fmt.Println(err)
		return
	}
	defer b.Close()

	p := &packet.Packet{At: time.Date(2026, 11, 29, 8, 0, 0, 0, time.UTC), Loc: time.UTC, IDField: "FarmId", SiteID: "001",
		DataType: "Weather", GatewayID: "gw-01", DeviceID: "rain-1", Fields: []packet.Field{{Name: "Rainfall", Value: packet.Float(0.2, 1)}}}
	seq, err := b.Append(context.Background(), p)
	if err != nil {
		fmt.Println(err)
		return
	}
	recs, _ := b.Lease(10) // leased: not handed out again until Release
	fmt.Println(len(recs), recs[0].Seq == seq, recs[0].At.Format(time.RFC3339))
	_ = b.Ack(recs[0].Seq) // the upstream acknowledged it: gone
	more, _ := b.Lease(10)
	fmt.Println(len(more), "left")
	// Output:
	// 1 true 2026-11-29T08:00:00Z
	// 0 left
}
