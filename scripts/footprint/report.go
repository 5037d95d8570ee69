package main

import (
	"fmt"
	"io"
	"os"
	"path/filepath"
	"runtime"
	"strconv"
	"strings"
	"text/tabwriter"
	"time"
)

// system is one side of the comparison while it runs.
type system struct {
	name    string
	proc    *child
	ledger  *ledger
	sampler *sampler
	w0, w1  usage
	samples []usage
	install int64 // bytes on disk to run it
	detail  string
	f       figures // once measured
}

// figures are what the report shows of one system at one step.
type figures struct {
	rssMedian, rssMax, hwm int64
	anonMedian, fileMedian int64
	cpu, before, window    time.Duration
	written                int64 // bytes written to the disk in the window; -1 if unknown
	packets, dups, devs    int
	size                   int // bytes of the last packet
}

func (s *system) figures() figures {
	var f figures
	var rss, anon, file []int64
	for _, u := range s.samples {
		f.rssMax = max(f.rssMax, u.RSS)
		f.hwm = max(f.hwm, u.HWM)
		if !u.At.Before(s.w0.At) && !u.At.After(s.w1.At) {
			rss, anon, file = append(rss, u.RSS), append(anon, u.Anon), append(file, u.File)
		}
	}
	f.rssMedian, f.anonMedian, f.fileMedian = median(rss), median(anon), median(file)
	f.cpu = s.w1.CPU - s.w0.CPU
	f.before = s.w0.CPU
	f.window = s.w1.At.Sub(s.w0.At)
	f.written = -1
	if s.w0.Written >= 0 && s.w1.Written >= 0 {
		f.written = s.w1.Written - s.w0.Written
	}
	f.packets, f.dups, f.devs = s.ledger.count(s.w0.At, s.w1.At)
	f.size = len(s.ledger.sample())
	return f
}

// perK is CPU seconds per 1,000 packets.
func (f figures) perK() float64 {
	if f.packets == 0 {
		return 0
	}
	return f.cpu.Seconds() / float64(f.packets) * 1000
}

// share is the CPU time over the window: the share of one core.
func (f figures) share() float64 {
	if f.window <= 0 {
		return 0
	}
	return f.cpu.Seconds() / f.window.Seconds()
}

// writtenPerPacket is bytes written to the disk per packet delivered, and
// that over the packet's size; -1 when unknown.
func (f figures) writtenPerPacket() (bytes, times float64) {
	if f.written < 0 || f.packets == 0 {
		return -1, -1
	}
	bytes = float64(f.written) / float64(f.packets)
	if f.size == 0 {
		return bytes, -1
	}
	return bytes, bytes / float64(f.size)
}

// over is a/b as a ratio, "n/a" when b is not positive.
func over(a, b float64) string {
	if b <= 0 || a < 0 {
		return "n/a"
	}
	return fmt.Sprintf("%.2fx", a/b)
}

func mb(b int64) string { return fmt.Sprintf("%.1f", float64(b)/1e6) }

// targets are the gateway's figures to meet, by step rate:
// CPU seconds per 1,000 packets, and the share of one core. The window
// must also hold every packet (at least -min-delivery of them).
var targets = map[int]struct{ perK, share float64 }{
	10:   {perK: 0.4},
	100:  {perK: 0.3},
	1000: {share: 0.35},
}

// report prints a table per step and a summary of all, and returns the exit
// code of the checks, and whether a system did not work (too few packets,
// wrong shapes).
func report(o options, root string, results [][]*system, out io.Writer) (code int, broken bool) {
	failed := false
	fail := func(format string, a ...any) {
		fmt.Fprintf(out, "FAIL: "+format+"\n", a...)
		failed = true
	}
	fmt.Fprintf(out, "\n== footprint: Modbus TCP -> MQTT QoS 1, %s windows (%s warm-up), %d cores, %s ==\n",
		o.duration, o.warmup, runtime.NumCPU(), time.Now().UTC().Format("2006-01-02T15:04Z"))
	for i, systems := range results {
		st := o.steps[i]
		expected := st.expected(o.duration)
		fmt.Fprintf(out, "\n-- %s --\n", st)
		w := tabwriter.NewWriter(out, 0, 0, 2, ' ', tabwriter.AlignRight)
		row := func(label string, cell func(f figures) string) {
			fmt.Fprintf(w, "%s\t", label)
			for _, s := range systems {
				fmt.Fprintf(w, "%s\t", cell(s.f))
			}
			fmt.Fprintln(w)
		}
		fmt.Fprintf(w, "\t")
		for _, s := range systems {
			fmt.Fprintf(w, "%s\t", s.name)
		}
		fmt.Fprintln(w)
		row("resident median, MB", func(f figures) string { return mb(f.rssMedian) })
		row("  of which anonymous (heap, stacks)", func(f figures) string { return mb(f.anonMedian) })
		row("  of which file-backed (code, mmap)", func(f figures) string { return mb(f.fileMedian) })
		row("resident max (from start), MB", func(f figures) string { return mb(f.rssMax) })
		row("CPU s per 1,000 packets", func(f figures) string { return fmt.Sprintf("%.3f", f.perK()) })
		row("share of one core", func(f figures) string { return fmt.Sprintf("%.1f%%", 100*f.share()) })
		row("CPU s before the window (start-up, warm-up)", func(f figures) string { return fmt.Sprintf("%.2f", f.before.Seconds()) })
		row("bytes written to disk per packet", func(f figures) string {
			b, x := f.writtenPerPacket()
			switch {
			case b < 0:
				return "n/a"
			case x < 0:
				return fmt.Sprintf("%.0f", b)
			}
			return fmt.Sprintf("%.0f (%.1fx)", b, x)
		})
		row("packet size, bytes", func(f figures) string { return strconv.Itoa(f.size) })
		row(fmt.Sprintf("packets delivered (expected %d)", expected), func(f figures) string { return strconv.Itoa(f.packets) })
		_ = w.Flush()

		for _, s := range systems {
			f := s.f
			if float64(f.packets) < o.minDelivery*float64(expected) {
				fail("%s at %d pkt/s delivered %d packets in the window, expected %d (at least %.0f%%)", s.name, st.rate, f.packets, expected, o.minDelivery*100)
				broken = broken || s.name == "fieldlink"
			}
			if f.devs < st.devices {
				fail("%s at %d pkt/s delivered from %d of %d devices", s.name, st.rate, f.devs, st.devices)
				broken = broken || s.name == "fieldlink"
			}
			if n, ex := s.ledger.issues(); n > 0 {
				fail("%s: %d packets of the wrong shape, e.g. %s", s.name, n, strings.Join(ex, "; "))
				broken = true
			}
			if f.dups > 0 {
				fmt.Fprintf(out, "note: %s: %d duplicate deliveries in the window (at-least-once)\n", s.name, f.dups)
			}
		}
		ours := systems[0].f
		for _, s := range systems[1:] {
			if s.name == "fieldlink (base)" {
				ob, _ := ours.writtenPerPacket()
				bb, _ := s.f.writtenPerPacket()
				fmt.Fprintf(out, "this revision over the base, measured side by side: resident median %s, CPU per 1,000 packets %s, bytes written per packet %s\n",
					over(float64(ours.rssMedian), float64(s.f.rssMedian)), over(ours.perK(), s.f.perK()), over(ob, bb))
			}
		}
		if float64(ours.rssMax) >= o.maxRSS*1e6 {
			fail("gateway resident max %s MB at %d pkt/s, target under %g MB", mb(ours.rssMax), st.rate, o.maxRSS)
		}
		if t, ok := targets[st.rate]; ok {
			if t.perK > 0 && ours.perK() > t.perK {
				fail("gateway CPU per 1,000 packets at %d pkt/s: %.3f s, target at most %g s", st.rate, ours.perK(), t.perK)
			}
			if t.share > 0 && ours.share() > t.share {
				fail("gateway share of one core at %d pkt/s: %.1f%%, target at most %.0f%%", st.rate, 100*ours.share(), 100*t.share)
			}
		}
	}

	// The summary: every system at every rate, side by side.
	fmt.Fprintf(out, "\n== summary (resident median; CPU per 1,000 packets; share of one core; bytes written per packet) ==\n")
	w := tabwriter.NewWriter(out, 0, 0, 2, ' ', tabwriter.AlignRight)
	fmt.Fprintf(w, "rate\tsystem\tdelivered\tresident MB\tCPU s/1000\tcore\twritten B/pkt\t\n")
	for i, systems := range results {
		st := o.steps[i]
		for _, s := range systems {
			b, x := s.f.writtenPerPacket()
			written := "n/a"
			if b >= 0 {
				written = fmt.Sprintf("%.0f", b)
				if x >= 0 {
					written += fmt.Sprintf(" (%.1fx)", x)
				}
			}
			fmt.Fprintf(w, "%d pkt/s\t%s\t%d/%d\t%s\t%.3f\t%.1f%%\t%s\t\n", st.rate, s.name, s.f.packets, st.expected(o.duration),
				mb(s.f.rssMedian), s.f.perK(), 100*s.f.share(), written)
		}
	}
	_ = w.Flush()
	fmt.Fprintf(out, "(MB = 10^6 bytes; resident = VmRSS of the process tree, sampled every second; CPU = utime+stime; written = write_bytes of /proc/PID/io)\n")
	for _, s := range results[0] {
		fmt.Fprintf(out, "install: %s %s MB = %s\n", s.name, mb(s.install), s.detail)
	}
	printDist(out, filepath.Join(root, o.dist))
	for _, s := range results[0] {
		if p := s.ledger.sample(); p != nil {
			fmt.Fprintf(out, "%s packet: %s\n", s.name, p)
		}
	}
	if failed {
		return 1, broken
	}
	fmt.Fprintln(out, "ok: every target met, every system delivered")
	return 0, false
}

// printDist prints the size of the newest `make dist` binary per target.
func printDist(out io.Writer, dist string) {
	files, _ := filepath.Glob(filepath.Join(dist, "fieldlink-gateway_*_linux_*"))
	newest := map[string]os.FileInfo{}
	for _, f := range files {
		st, err := os.Stat(f)
		if err != nil || !st.Mode().IsRegular() {
			continue
		}
		i := strings.LastIndex(f, "_linux_")
		target := f[i+len("_linux_"):]
		if cur, ok := newest[target]; !ok || st.ModTime().After(cur.ModTime()) {
			newest[target] = st
		}
	}
	if len(newest) == 0 {
		fmt.Fprintf(out, "binary size per target: no binaries in %s (run make dist)\n", dist)
		return
	}
	var parts []string
	for _, t := range []string{"armv6", "armv7", "arm64", "amd64"} {
		if st, ok := newest[t]; ok {
			parts = append(parts, fmt.Sprintf("%s %.1f MiB (%s)", t, float64(st.Size())/(1<<20), st.Name()))
		}
	}
	fmt.Fprintf(out, "binary size per target (%s, make dist): %s\n", dist, strings.Join(parts, ", "))
}
