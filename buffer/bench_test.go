package buffer

import (
	"bufio"
	"context"
	"fmt"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	bolt "go.etcd.io/bbolt"

	"fieldlink/packet"
)

// The benchmarks report, besides ns/op:
//
//	appends/s              packets appended per second (the append loop only)
//	bytes-written/payload  write_bytes of /proc/self/io per packet (commits and
//	                       Close included) ÷ the packet's JSON size: what bbolt
//	                       writes per packet, before the filesystem's journal
//	                       and the card's own write amplification
//	appends/commit         packets per transaction
//	ms/commit              wall time per transaction
//	drained/s              records leased and acked per second (BenchmarkDrain)
//
// Group commit's gain is the ratio of BenchmarkAppend/always/group=100 over
// BenchmarkAppend/always/commit=each, in appends/s. group=11 is the demo
// site: one commit per poll cycle of eleven packets.

// writeBytes returns this process's write_bytes from /proc/self/io.
func writeBytes() (int64, bool) {
	f, err := os.Open("/proc/self/io")
	if err != nil {
		return 0, false
	}
	defer f.Close()
	sc := bufio.NewScanner(f)
	for sc.Scan() {
		if v, ok := strings.CutPrefix(sc.Text(), "write_bytes: "); ok {
			n, err := strconv.ParseInt(v, 10, 64)
			return n, err == nil
		}
	}
	return 0, false
}

// payloadSize is the JSON size of the benchmark packet.
func payloadSize() int { return len(wantJSON(bench20(), 1234567, "01234567", 0)) }

func BenchmarkAppend(b *testing.B) {
	for _, bc := range []struct {
		name       string
		opt        Options
		batch      int // packets per AppendAll (1: Append)
		goroutines int
	}{
		{"always/commit=each", Options{}, 1, 1},
		{"always/group=11", Options{}, 11, 1},
		{"always/group=100", Options{}, 100, 1},
		{"always/goroutines=16", Options{}, 1, 16},
		{"interval/sync=1s", Options{Durability: Interval}, 1, 1},
		{"interval/sync=1s/goroutines=16", Options{Durability: Interval}, 1, 16},
	} {
		b.Run(bc.name, func(b *testing.B) {
			opt := bc.opt
			opt.Logger = quietLogger()
			path := filepath.Join(b.TempDir(), "buffer.db")
			buf, err := Open(path, opt)
			if err != nil {
				b.Fatal(err)
			}
			ctx := context.Background()
			p := bench20()
			w0, ioOK := writeBytes()
			c0 := buf.Stats().Commits
			b.ResetTimer()
			var n int
			if bc.goroutines == 1 {
				ps := make([]*packet.Packet, bc.batch)
				for b.Loop() {
					for i := range ps {
						q := *p
						ps[i] = &q
					}
					if err := buf.AppendAll(ctx, ps...); err != nil {
						b.Fatal(err)
					}
					n += len(ps)
				}
			} else {
				per := max(b.N/bc.goroutines, 1)
				var wg sync.WaitGroup
				for range bc.goroutines {
					wg.Go(func() {
						for range per {
							q := *p
							if _, err := buf.Append(ctx, &q); err != nil {
								b.Error(err)
								return
							}
						}
					})
				}
				wg.Wait()
				n = per * bc.goroutines
			}
			elapsed := b.Elapsed()
			b.StopTimer()
			if err := buf.Close(); err != nil { // Interval: the last commit
				b.Fatal(err)
			}
			w1, _ := writeBytes()
			commits := buf.Stats().Commits - c0
			b.ReportMetric(float64(n)/elapsed.Seconds(), "appends/s")
			if commits > 0 {
				b.ReportMetric(float64(n)/float64(commits), "appends/commit")
				b.ReportMetric(elapsed.Seconds()*1000/float64(commits), "ms/commit")
			}
			if ioOK {
				b.ReportMetric(float64(w1-w0)/float64(n)/float64(payloadSize()), "bytes-written/payload")
			}
		})
	}

	// bbolt's own batching, for comparison: DB.Batch merges concurrent
	// callers only (waiting up to 10 ms for more), and may run a function
	// twice.
	b.Run("bbolt-batch/goroutines=16", func(b *testing.B) {
		db, err := bolt.Open(filepath.Join(b.TempDir(), "batch.db"), 0o600, nil)
		if err != nil {
			b.Fatal(err)
		}
		defer db.Close()
		if err := db.Update(func(tx *bolt.Tx) error {
			_, err := tx.CreateBucket(bucketNormal)
			return err
		}); err != nil {
			b.Fatal(err)
		}
		json := wantJSON(bench20(), 1234567, "01234567", 0)
		w0, ioOK := writeBytes()
		b.ResetTimer()
		per := max(b.N/16, 1)
		var wg sync.WaitGroup
		for range 16 {
			wg.Go(func() {
				for range per {
					err := db.Batch(func(tx *bolt.Tx) error {
						bk := tx.Bucket(bucketNormal)
						bk.FillPercent = 1.0
						seq, err := bk.NextSequence()
						if err != nil {
							return err
						}
						k := itob(seq)
						v := append(make([]byte, headerSize, headerSize+len(json)), json...)
						sealRecord(k, v, false, 0)
						return bk.Put(k, v)
					})
					if err != nil {
						b.Error(err)
						return
					}
				}
			})
		}
		wg.Wait()
		elapsed := b.Elapsed()
		b.StopTimer()
		w1, _ := writeBytes()
		n := per * 16
		b.ReportMetric(float64(n)/elapsed.Seconds(), "appends/s")
		if ioOK {
			b.ReportMetric(float64(w1-w0)/float64(n)/float64(payloadSize()), "bytes-written/payload")
		}
	})
}

// BenchmarkDrain measures delivery from a backlog: Lease(100) and Ack of
// what it returned, with Always durability.
func BenchmarkDrain(b *testing.B) {
	for _, order := range []Order{OldestFirst, NewestFirst} {
		b.Run(order.String(), func(b *testing.B) {
			buf, err := Open(filepath.Join(b.TempDir(), "buffer.db"), Options{Order: order, MaxBytes: 8 << 30, Logger: quietLogger()})
			if err != nil {
				b.Fatal(err)
			}
			defer buf.Close()
			const batch = 100
			total := b.N * batch
			p := bench20()
			ps := make([]*packet.Packet, 0, 1000)
			for i := 0; i < total; i += cap(ps) {
				ps = ps[:0]
				for range min(cap(ps), total-i) {
					q := *p
					ps = append(ps, &q)
				}
				if err := buf.AppendAll(context.Background(), ps...); err != nil {
					b.Fatal(err)
				}
			}
			b.ResetTimer()
			start := time.Now()
			drained := 0
			for range b.N {
				recs, err := buf.Lease(batch)
				if err != nil {
					b.Fatal(err)
				}
				if err := buf.Ack(seqsOf(recs)...); err != nil {
					b.Fatal(err)
				}
				drained += len(recs)
			}
			b.ReportMetric(float64(drained)/time.Since(start).Seconds(), "drained/s")
			if buf.Len() != 0 {
				b.Fatalf("%d left", buf.Len())
			}
		})
	}
}

// BenchmarkCycle is a site's steady flow with the default durability
// (always), as the gateway runs it: every cycle the pollers put one packet
// per device through the Appender (each but the cycle's last says More), and
// the delivery acks the previous cycle's packets with AckLater. One op is
// one cycle; bytes-written/payload is the SD-card figure (write_bytes of
// /proc/self/io per packet over the packet's JSON size; target ≤ 5 at 20
// devices), commits/cycle what it costs in fsyncs (two per commit).
//
// pages=4096 is a file of bbolt's default page size (files made before
// pageSize, and the figure before it); pages=1024 is a new file. Beside
// them, jsonl-fsync is the least any store with the same promise writes: the
// cycle's packets appended to a file as JSON lines, one fdatasync per cycle,
// nothing ever deleted (Telegraf's file output, fsynced).
func BenchmarkCycle(b *testing.B) {
	for _, devices := range []int{10, 20, 100} {
		for _, ps := range []int{4096, pageSize} {
			b.Run(fmt.Sprintf("devices=%d/pages=%d", devices, ps), func(b *testing.B) {
				benchCycle(b, devices, ps)
			})
		}
		b.Run(fmt.Sprintf("devices=%d/jsonl-fsync", devices), func(b *testing.B) {
			f, err := os.Create(filepath.Join(b.TempDir(), "packets.jsonl"))
			if err != nil {
				b.Fatal(err)
			}
			line := append(wantJSON(bench20(), 1234567, "01234567", 0), '\n')
			w0, ioOK := writeBytes()
			cycles := 0
			for b.Loop() {
				for range devices {
					if _, err := f.Write(line); err != nil {
						b.Fatal(err)
					}
				}
				if err := syscall.Fdatasync(int(f.Fd())); err != nil {
					b.Fatal(err)
				}
				cycles++
			}
			b.StopTimer()
			if err := f.Close(); err != nil {
				b.Fatal(err)
			}
			w1, _ := writeBytes()
			if ioOK {
				b.ReportMetric(float64(w1-w0)/float64(cycles*devices)/float64(payloadSize()), "bytes-written/payload")
			}
		})
	}
}

// benchCycle runs BenchmarkCycle's flow on a new file of pages of ps bytes.
func benchCycle(b *testing.B, devices, ps int) {
	buf, err := Open(filepath.Join(b.TempDir(), "buffer.db"), Options{Logger: quietLogger(), pageSize: ps})
	if err != nil {
		b.Fatal(err)
	}
	var stored sync.WaitGroup
	a := NewAppender(buf, AppenderOptions{Logger: quietLogger(), OnStored: func(*packet.Packet) { stored.Done() }})
	go a.Run()
	p := bench20()
	w0, ioOK := writeBytes()
	c0 := buf.Stats().Commits
	cycles := 0
	for b.Loop() {
		stored.Add(devices)
		for i := range devices {
			q := *p
			q.More = i < devices-1
			a.Put(&q)
		}
		stored.Wait()
		recs, err := buf.Lease(2 * devices)
		if err != nil {
			b.Fatal(err)
		}
		if err := buf.AckLater(seqsOf(recs)...); err != nil {
			b.Fatal(err)
		}
		cycles++
	}
	b.StopTimer()
	a.Close()
	commits := buf.Stats().Commits - c0
	if err := buf.Close(); err != nil {
		b.Fatal(err)
	}
	w1, _ := writeBytes()
	b.ReportMetric(float64(commits)/float64(cycles), "commits/cycle")
	if ioOK {
		b.ReportMetric(float64(w1-w0)/float64(cycles*devices)/float64(payloadSize()), "bytes-written/payload")
	}
}
