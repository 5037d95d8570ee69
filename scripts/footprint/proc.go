package main

import (
	"bytes"
	"fmt"
	"os"
	"path/filepath"
	"slices"
	"strconv"
	"sync"
	"time"
)

// clockTicks is USER_HZ, the unit of utime and stime in /proc/PID/stat:
// 100 on every Linux architecture the gateway targets.
const clockTicks = 100

// usage is one look at a process tree: resident memory (VmRSS summed over
// the tree), CPU time (utime+stime summed over the tree) and the root's
// VmHWM (peak resident since it started).
type usage struct {
	At   time.Time
	RSS  int64 // bytes
	Anon int64 // bytes of RSS that are anonymous (heap, stacks): RssAnon
	File int64 // bytes of RSS that are file-backed (code, mmapped files): RssFile + RssShmem
	HWM  int64 // bytes, root process only
	CPU  time.Duration
	// Written is write_bytes of /proc/PID/io summed over the tree: bytes
	// the processes caused to be written to the disk; -1 when unreadable.
	Written int64
	Procs   int
}

// statFields returns the fields of /proc/PID/stat after the command name,
// which may itself contain spaces and parentheses: field 3 (state) is
// fields[0].
func statFields(data []byte) ([][]byte, error) {
	i := bytes.LastIndexByte(data, ')')
	if i < 0 {
		return nil, fmt.Errorf("no command name in stat line")
	}
	f := bytes.Fields(data[i+1:])
	if len(f) < 13 {
		return nil, fmt.Errorf("short stat line (%d fields after the name)", len(f))
	}
	return f, nil
}

// readStat returns the parent pid and utime+stime of pid.
func readStat(pid int) (ppid int, cpu time.Duration, err error) {
	data, err := os.ReadFile(fmt.Sprintf("/proc/%d/stat", pid))
	if err != nil {
		return 0, 0, err
	}
	f, err := statFields(data)
	if err != nil {
		return 0, 0, fmt.Errorf("/proc/%d/stat: %w", pid, err)
	}
	// fields[1] is ppid (field 4); fields[11] and fields[12] are utime and
	// stime (fields 14 and 15).
	ppid, err = strconv.Atoi(string(f[1]))
	if err != nil {
		return 0, 0, fmt.Errorf("/proc/%d/stat: ppid: %w", pid, err)
	}
	var ticks int64
	for _, s := range f[11:13] {
		n, err := strconv.ParseInt(string(s), 10, 64)
		if err != nil {
			return 0, 0, fmt.Errorf("/proc/%d/stat: cpu time: %w", pid, err)
		}
		ticks += n
	}
	return ppid, time.Duration(ticks) * time.Second / clockTicks, nil
}

// statusKB returns the given "Key:   123 kB" lines of /proc/PID/status in
// bytes; a missing key (a zombie has no VmRSS) is 0.
func statusKB(pid int, keys ...string) ([]int64, error) {
	data, err := os.ReadFile(fmt.Sprintf("/proc/%d/status", pid))
	if err != nil {
		return nil, err
	}
	return parseStatusKB(data, keys...), nil
}

func parseStatusKB(data []byte, keys ...string) []int64 {
	out := make([]int64, len(keys))
	for line := range bytes.Lines(data) {
		k, v, ok := bytes.Cut(line, []byte(":"))
		if !ok {
			continue
		}
		i := slices.Index(keys, string(k))
		if i < 0 {
			continue
		}
		f := bytes.Fields(v)
		if len(f) == 2 && string(f[1]) == "kB" {
			n, _ := strconv.ParseInt(string(f[0]), 10, 64)
			out[i] = n * 1024
		}
	}
	return out
}

// writeBytes returns write_bytes of /proc/PID/io, or -1 when it cannot be
// read (another user's process, without root).
func writeBytes(pid int) int64 {
	data, err := os.ReadFile(fmt.Sprintf("/proc/%d/io", pid))
	if err != nil {
		return -1
	}
	return parseIOWritten(data)
}

// parseIOWritten returns write_bytes from the text of /proc/PID/io, or -1.
func parseIOWritten(data []byte) int64 {
	for line := range bytes.Lines(data) {
		if v, ok := bytes.CutPrefix(line, []byte("write_bytes:")); ok {
			n, err := strconv.ParseInt(string(bytes.TrimSpace(v)), 10, 64)
			if err == nil {
				return n
			}
		}
	}
	return -1
}

// descendants returns pid and every process below it.
func descendants(pid int) []int {
	parent := map[int]int{}
	dirs, _ := filepath.Glob("/proc/[0-9]*")
	for _, d := range dirs {
		p, err := strconv.Atoi(filepath.Base(d))
		if err != nil {
			continue
		}
		if pp, _, err := readStat(p); err == nil {
			parent[p] = pp
		}
	}
	tree := []int{pid}
	for changed := true; changed; {
		changed = false
		for p, pp := range parent {
			if slices.Contains(tree, pp) && !slices.Contains(tree, p) {
				tree = append(tree, p)
				changed = true
			}
		}
	}
	return tree
}

// measure looks at pid and its descendants once.
func measure(pid int) (usage, error) {
	u := usage{At: time.Now()}
	for _, p := range descendants(pid) {
		_, cpu, err := readStat(p)
		if err != nil {
			if p == pid {
				return u, err
			}
			continue // a child that just exited
		}
		kb, err := statusKB(p, "VmRSS", "VmHWM", "RssAnon", "RssFile", "RssShmem")
		if err != nil {
			if p == pid {
				return u, err
			}
			continue
		}
		u.CPU += cpu
		if w := writeBytes(p); w >= 0 && u.Written >= 0 {
			u.Written += w
		} else if p == pid {
			u.Written = -1
		}
		u.RSS += kb[0]
		u.Anon += kb[2]
		u.File += kb[3] + kb[4]
		if p == pid {
			u.HWM = kb[1]
		}
		u.Procs++
	}
	return u, nil
}

// sampler measures a process tree every period until stopped.
type sampler struct {
	pid  int
	mu   sync.Mutex
	all  []usage
	stop chan struct{}
	done chan struct{}
}

func startSampler(pid int, period time.Duration) *sampler {
	s := &sampler{pid: pid, stop: make(chan struct{}), done: make(chan struct{})}
	go func() {
		defer close(s.done)
		t := time.NewTicker(period)
		defer t.Stop()
		for {
			s.sample()
			select {
			case <-s.stop:
				return
			case <-t.C:
			}
		}
	}()
	return s
}

// sample takes one measurement now and returns it.
func (s *sampler) sample() (usage, error) {
	u, err := measure(s.pid)
	if err == nil {
		s.mu.Lock()
		s.all = append(s.all, u)
		s.mu.Unlock()
	}
	return u, err
}

// Stop ends the sampling and returns every sample, oldest first.
func (s *sampler) Stop() []usage {
	close(s.stop)
	<-s.done
	s.mu.Lock()
	defer s.mu.Unlock()
	return slices.Clone(s.all)
}

// median of xs (the mean of the middle two for an even count); 0 if empty.
func median(xs []int64) int64 {
	if len(xs) == 0 {
		return 0
	}
	s := slices.Clone(xs)
	slices.Sort(s)
	n := len(s)
	if n%2 == 1 {
		return s[n/2]
	}
	return (s[n/2-1] + s[n/2]) / 2
}
