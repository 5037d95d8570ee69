package buffer

import (
	"context"
	"fmt"
	"math/rand/v2"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"fieldlink/internal/testtool"
	"fieldlink/packet"
)

// isAlarm reports whether the stored JSON data is an alarm packet's.
func isAlarm(t testing.TB, data []byte) bool {
	t.Helper()
	p, err := packet.Decode(data)
	if err != nil {
		t.Fatal(err)
	}
	return p.Alarm()
}

func TestDeadLetterAckAppendConcurrently(t *testing.T) {
	noLeak(t)
	for _, d := range []Durability{Always, Interval} {
		t.Run(d.String(), func(t *testing.T) {
			b, _ := newT(t, Options{Durability: d, SyncEvery: 2 * time.Millisecond, deadMax: 1 << 20})
			const producers, perProducer, consumers = 3, 100, 3
			const n = producers * perProducer
			var wg sync.WaitGroup
			var errs sync.Map
			fail := func(what string, err error) { errs.Store(what, err) }
			for p := range producers {
				wg.Go(func() {
					for i := 0; i < perProducer; i += 5 {
						ps := make([]*packet.Packet, 5)
						for j := range ps {
							ps[j] = testPacket(fmt.Sprintf("c-%d-%d", p, i+j), j == 0)
						}
						if err := b.AppendAll(context.Background(), ps...); err != nil {
							fail("append", err)
							return
						}
					}
				})
			}
			// Each record goes one way, by its seq: acked, dead-lettered, or
			// both at once (either may win).
			var mu sync.Mutex
			fate := map[uint64]string{}
			var handled atomic.Int64
			ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
			defer cancel()
			// allDone ends the consumers' Waits once every record is handled.
			allDone, finish := context.WithCancel(ctx)
			defer finish()
			for c := range consumers {
				wg.Go(func() {
					rng := rand.New(rand.NewPCG(uint64(c), 1))
					for handled.Load() < n && ctx.Err() == nil {
						recs, err := b.Lease(1 + rng.IntN(8))
						if err != nil {
							fail("next", err)
							return
						}
						if len(recs) == 0 {
							_ = b.Wait(allDone) // the loop looks at why it returned
							continue
						}
						var ack, dead, both []uint64
						mu.Lock()
						for _, r := range recs {
							switch r.Seq % 3 {
							case 0:
								ack = append(ack, r.Seq)
								fate[r.Seq] = "ack"
							case 1:
								dead = append(dead, r.Seq)
								fate[r.Seq] = "dead"
							default:
								both = append(both, r.Seq)
								fate[r.Seq] = "either"
							}
						}
						mu.Unlock()
						var inner sync.WaitGroup
						inner.Go(func() {
							if err := b.Ack(append(ack, both...)...); err != nil {
								fail("ack", err)
							}
						})
						inner.Go(func() {
							if err := b.DeadLetter(fmt.Sprint("consumer ", c), append(dead, both...)...); err != nil {
								fail("dead", err)
							}
						})
						inner.Wait()
						if handled.Add(int64(len(recs))) >= n {
							finish()
						}
					}
				})
			}
			// Readers meanwhile.
			wg.Go(func() {
				for handled.Load() < n && ctx.Err() == nil {
					_ = b.Stats()
					if err := b.EachDead(func(Record, string) error { return nil }); err != nil {
						fail("each dead", err)
						return
					}
					time.Sleep(time.Millisecond) // pacing, not synchronisation
				}
			})
			wg.Wait()
			errs.Range(func(k, v any) bool { t.Errorf("%s: %v", k, v); return true })
			if ctx.Err() != nil {
				t.Fatalf("timed out: %d of %d handled", handled.Load(), n)
			}
			// Interval answers before the commit; the leases go with it.
			testtool.WaitFor(t, 10*time.Second, "the last commit", func() bool { return b.Stats().Leased == 0 })

			dead := allDead(t, b)
			seen := map[uint64]bool{}
			for _, r := range dead {
				if seen[r.Seq] || (fate[r.Seq] != "dead" && fate[r.Seq] != "either") {
					t.Fatalf("dead letter %d: twice %v, fate %q", r.Seq, seen[r.Seq], fate[r.Seq])
				}
				seen[r.Seq] = true
			}
			for seq, f := range fate {
				if f == "dead" && !seen[seq] {
					t.Fatalf("record %d was dead-lettered, not in EachDead", seq)
				}
			}
			st := b.Stats()
			if len(fate) != n || b.Len() != 0 || b.Bytes() != 0 || st.Leased != 0 ||
				st.DeadDepth != len(dead) || st.DeadLetters != uint64(len(dead)) || st.DeadDropped != 0 {
				t.Fatalf("%d handled, Len %d Bytes %d Leased %d DeadDepth %d DeadLetters %d (EachDead %d)",
					len(fate), b.Len(), b.Bytes(), st.Leased, st.DeadDepth, st.DeadLetters, len(dead))
			}
		})
	}
}
