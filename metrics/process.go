package metrics

import (
	"bytes"
	"os"
	"runtime"
	"runtime/metrics"
	"strconv"
	"strings"
	"syscall"
)

// The Go runtime and process metrics, under the names the reference
// client's collectors use, so that the usual dashboards and alerts work.
var (
	goGoroutines    = &Desc{name: "go_goroutines", help: "Number of goroutines that currently exist.", typ: gaugeType}
	goHeapAlloc     = &Desc{name: "go_memstats_heap_alloc_bytes", help: "Number of heap bytes allocated and currently in use.", typ: gaugeType}
	goSys           = &Desc{name: "go_memstats_sys_bytes", help: "Number of bytes obtained from system.", typ: gaugeType}
	goInfo          = &Desc{name: "go_info", help: "Information about the Go environment.", typ: gaugeType, labels: []string{"version"}}
	procCPU         = &Desc{name: "process_cpu_seconds_total", help: "Total user and system CPU time spent in seconds.", typ: counterType}
	procRSS         = &Desc{name: "process_resident_memory_bytes", help: "Resident memory size in bytes.", typ: gaugeType}
	procVirt        = &Desc{name: "process_virtual_memory_bytes", help: "Virtual memory size in bytes.", typ: gaugeType}
	procOpenFDs     = &Desc{name: "process_open_fds", help: "Number of open file descriptors.", typ: gaugeType}
	procMaxFDs      = &Desc{name: "process_max_fds", help: "Maximum number of open file descriptors.", typ: gaugeType}
	procStartTime   = &Desc{name: "process_start_time_seconds", help: "Start time of the process since unix epoch in seconds.", typ: gaugeType}
	runtimeFamilies = []*Desc{goGoroutines, goHeapAlloc, goSys, goInfo, procCPU, procRSS, procVirt, procOpenFDs, procMaxFDs, procStartTime, scrapeErrorsDesc}
)

// userHZ is the kernel's clock tick for /proc times: 100 on every Linux
// architecture the gateway ships for.
const userHZ = 100

// collectRuntime adds the Go runtime's figures and, where /proc exists,
// the process's. A figure it cannot read is left out.
func collectRuntime(s *Scrape) {
	rs := []metrics.Sample{
		{Name: "/sched/goroutines:goroutines"},
		{Name: "/memory/classes/heap/objects:bytes"},
		{Name: "/memory/classes/total:bytes"},
	}
	metrics.Read(rs)
	for i, d := range []*Desc{goGoroutines, goHeapAlloc, goSys} {
		if rs[i].Value.Kind() == metrics.KindUint64 {
			s.add(d, sample{value: float64(rs[i].Value.Uint64())})
		}
	}
	s.add(goInfo, sample{labels: []string{runtime.Version()}, value: 1})

	// /proc/self/stat: the fields after the command name in parentheses,
	// which may itself hold spaces and parentheses.
	if b, err := os.ReadFile("/proc/self/stat"); err == nil {
		if i := bytes.LastIndexByte(b, ')'); i >= 0 {
			f := strings.Fields(string(b[i+1:])) // f[0] is field 3, state
			num := func(field int) (float64, bool) {
				if field-3 >= len(f) {
					return 0, false
				}
				v, err := strconv.ParseUint(f[field-3], 10, 64)
				return float64(v), err == nil
			}
			ut, ok1 := num(14)
			st, ok2 := num(15)
			if ok1 && ok2 {
				s.add(procCPU, sample{value: (ut + st) / userHZ})
			}
			if v, ok := num(23); ok {
				s.add(procVirt, sample{value: v})
			}
			if v, ok := num(24); ok {
				s.add(procRSS, sample{value: v * float64(os.Getpagesize())})
			}
			if start, ok := num(22); ok {
				if bt, ok := bootTime(); ok {
					s.add(procStartTime, sample{value: bt + start/userHZ})
				}
			}
		}
	}
	if ents, err := os.ReadDir("/proc/self/fd"); err == nil {
		s.add(procOpenFDs, sample{value: float64(len(ents))})
	}
	var rl syscall.Rlimit
	if err := syscall.Getrlimit(syscall.RLIMIT_NOFILE, &rl); err == nil {
		s.add(procMaxFDs, sample{value: float64(rl.Cur)})
	}
}

// bootTime is the btime line of /proc/stat: the boot time in Unix seconds.
func bootTime() (float64, bool) {
	b, err := os.ReadFile("/proc/stat")
	if err != nil {
		return 0, false
	}
	for line := range strings.SplitSeq(string(b), "\n") {
		if v, ok := strings.CutPrefix(line, "btime "); ok {
			n, err := strconv.ParseUint(strings.TrimSpace(v), 10, 64)
			return float64(n), err == nil
		}
	}
	return 0, false
}
