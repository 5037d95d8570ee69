package buffer

import (
	"context"
	"fmt"
	"os"
	"path/filepath"
	"strconv"
	"testing"
	"time"

	bolt "go.etcd.io/bbolt"

	"fieldlink/internal/testtool"
	"fieldlink/packet"
)

// TestOpenTime measures Open on a buffer of FIELDLINK_OPEN_RECORDS records
// (default 1,000,000; long mode only): clean and unclean, with and without
// bbolt's NoFreelistSync, and the page check alone.
func TestOpenTime(t *testing.T) {
	if !longMode() {
		t.Skip("FIELDLINK_LONG=1 to measure Open on a million records")
	}
	n := 1000000
	if s := os.Getenv("FIELDLINK_OPEN_RECORDS"); s != "" {
		n, _ = strconv.Atoi(s)
	}
	for _, nfs := range []bool{false, true} {
		t.Run(fmt.Sprint("NoFreelistSync=", nfs), func(t *testing.T) {
			path := filepath.Join(t.TempDir(), "buffer.db")
			opt := Options{MaxBytes: 4 << 30, Logger: quietLogger(), noFreelistSync: nfs}
			b, err := Open(path, opt)
			if err != nil {
				t.Fatal(err)
			}
			p := bench20()
			start := time.Now()
			batch := make([]*packet.Packet, 1000)
			for i := 0; i < n; i += len(batch) {
				for j := range batch {
					q := *p
					batch[j] = &q
				}
				if err := b.AppendAll(context.Background(), batch...); err != nil {
					t.Fatal(err)
				}
			}
			fill := time.Since(start)
			// Ack the oldest tenth, as a drained backlog leaves it.
			var ack []uint64
			for s := uint64(1); s <= uint64(n/10); s++ {
				ack = append(ack, s)
			}
			if err := b.Ack(ack...); err != nil {
				t.Fatal(err)
			}
			b.Close()
			size := fileSize(t, path)

			timeOpen := func() time.Duration {
				start := time.Now()
				b, err := Open(path, opt)
				if err != nil {
					t.Fatal(err)
				}
				d := time.Since(start)
				if b.Len() != n-n/10 {
					t.Fatalf("Len %d", b.Len())
				}
				b.Close()
				return d
			}
			clean := timeOpen()
			// Unclean: what Open finds after a crash.
			markUnclean(t, path)
			unclean := timeOpen()

			f, _ := os.Open(path)
			start = time.Now()
			if _, err := check(f, size); err != nil {
				t.Fatal(err)
			}
			walk := time.Since(start)
			f.Close()
			db, _ := bolt.Open(path, 0o600, &bolt.Options{NoFreelistSync: nfs})
			start = time.Now()
			if err := boltCheck(db); err != nil {
				t.Fatal(err)
			}
			bcheck := time.Since(start)
			start = time.Now()
			db.Close()
			db, _ = bolt.Open(path, 0o600, &bolt.Options{NoFreelistSync: nfs})
			bopen := time.Since(start)
			db.Close()
			t.Logf("%d records, file %.1f MiB, filled in %v: Open clean %v, after a crash %v; page walk %v, bbolt check %v, bare bbolt open %v",
				n, float64(size)/(1<<20), fill.Round(time.Millisecond), clean.Round(time.Millisecond), unclean.Round(time.Millisecond),
				walk.Round(time.Millisecond), bcheck.Round(time.Millisecond), bopen.Round(time.Millisecond))
			if nfs {
				return
			}
			// Drain to a fifth: the next commit finds the file more than
			// four times the live data and compacts it, while an append
			// waits.
			b, err = Open(path, opt)
			if err != nil {
				t.Fatal(err)
			}
			defer b.Close()
			ack = ack[:0]
			for s := uint64(n / 10); s <= uint64(n*8/10); s++ {
				ack = append(ack, s)
			}
			if err := b.Ack(ack...); err != nil {
				t.Fatal(err)
			}
			live := b.Bytes()
			start = time.Now()
			mustAppend(t, b, bench20()) // waits for the compaction the ack set off
			testtool.WaitFor(t, time.Minute, "compaction", func() bool { return b.Stats().Compactions == 1 })
			t.Logf("compaction of a %.1f MiB file with %.1f MiB live: %v (appends wait meanwhile), file now %.1f MiB",
				float64(size)/(1<<20), float64(live)/(1<<20), time.Since(start).Round(time.Millisecond), float64(fileSize(t, path))/(1<<20))
		})
	}
}

// markUnclean clears the clean flag of a closed buffer file, as a crash
// leaves it.
func markUnclean(t testing.TB, path string) {
	t.Helper()
	db, err := bolt.Open(path, 0o600, nil)
	if err != nil {
		t.Fatal(err)
	}
	defer db.Close()
	if err := db.Update(func(tx *bolt.Tx) error {
		meta := tx.Bucket(bucketMeta)
		st, _ := decodeState(meta.Get(keyState))
		st.clean = false
		return meta.Put(keyState, st.encode())
	}); err != nil {
		t.Fatal(err)
	}
}

// bench20 is a weather and soil station's packet with twenty values, the
// largest device in the farm profiles (as in packet's benchmarks).
func bench20() *packet.Packet {
	return &packet.Packet{
		At: time.Date(2026, 11, 29, 8, 0, 0, 0, time.UTC), IDField: "FarmId", SiteID: "001",
		DataType: "Weather", GatewayID: "gw-01", DeviceID: "ws-1",
		Fields: []packet.Field{
			{Name: "Temperature", Value: packet.Float(25.3, 1)}, {Name: "Humidity", Value: packet.Float(50.25, 1)},
			{Name: "WindSpeed", Value: packet.Float(15.5, 1)}, {Name: "WindDir", Value: packet.Int(270)},
			{Name: "Light", Value: packet.Uint(10240)}, {Name: "Rainfall", Value: packet.Float(0, 1)},
			{Name: "isRain", Value: packet.Bool(false)}, {Name: "Pressure", Value: packet.Float(1013.25, 2)},
			{Name: "CO2", Value: packet.Int(412)}, {Name: "PM25", Value: packet.Float(35.2, 1)},
			{Name: "PM10", Value: packet.Float(61.7, 1)}, {Name: "SoilTemp", Value: packet.Float(18.4, 1)},
			{Name: "SoilMoisture", Value: packet.Float(32.1, 1)}, {Name: "SoilEC", Value: packet.Int(1250)},
			{Name: "SoilPH", Value: packet.Float(6.82, 2)}, {Name: "SoilN", Value: packet.Int(45)},
			{Name: "SoilP", Value: packet.Int(18)}, {Name: "SoilK", Value: packet.Int(120)},
			{Name: "Battery", Value: packet.Float(3.712, 3)}, {Name: "Signal", Value: packet.Int(-71)},
		},
	}
}
