//go:build linux

// Command dmctl makes a dying SD card in the power cut tests' VM
// (tests/powercut, sdcard_vm_test.go): it creates a device-mapper device
// and swaps its table, as dmsetup does, with the kernel's ioctls alone
// (busybox has no dmsetup):
//
//	dmctl create NAME TABLE   a device NAME (/dev/dm-N) with TABLE
//	dmctl load NAME TABLE     TABLE in place of NAME's (suspend, resume)
//
// TABLE is one line of dmsetup's table format, "start length target
// args": "0 131072 linear /dev/vda 0", "0 131072 flakey /dev/vda 0 0 3600
// 1 error_writes", "0 131072 error", "0 131072 delay /dev/vda 0 0 /dev/vda
// 0 2000". Each prints one line, "powercut: dm VERB NAME ok" or
// "powercut: dm error: ...", which the test waits for on the console.
package main

import (
	"encoding/binary"
	"fmt"
	"os"
	"strconv"
	"strings"
	"syscall"
	"unsafe"
)

// The ioctls of linux/dm-ioctl.h: _IOWR(0xfd, nr, struct dm_ioctl), whose
// size is 312 bytes.
const (
	dmIoctlSize  = 312
	dmSpecSize   = 40
	dmDevCreate  = 0xc000fd03 | dmIoctlSize<<16
	dmDevSuspend = 0xc000fd06 | dmIoctlSize<<16
	dmTableLoad  = 0xc000fd09 | dmIoctlSize<<16

	dmSuspendFlag   = 1 << 1
	dmSkipLockfs    = 1 << 10
	dmNameOffset    = 48 // version[3], data_size, data_start, target_count, open_count, flags, event_nr, padding, dev
	dmDataSizeAt    = 12
	dmDataStartAt   = 16
	dmTargetCountAt = 20
	dmFlagsAt       = 28
)

func main() {
	if len(os.Args) != 4 {
		fmt.Println("powercut: dm error: usage: dmctl create|load NAME TABLE")
		os.Exit(2)
	}
	verb, name, table := os.Args[1], os.Args[2], os.Args[3]
	if err := run(verb, name, table); err != nil {
		fmt.Printf("powercut: dm error: %s %s: %v\n", verb, name, err)
		os.Exit(1)
	}
	fmt.Printf("powercut: dm %s %s ok\n", verb, name)
}

func run(verb, name, table string) error {
	ctl, err := os.OpenFile("/dev/mapper/control", os.O_RDWR, 0)
	if err != nil {
		return err
	}
	defer ctl.Close()
	fd := ctl.Fd()
	switch verb {
	case "create":
		if err := ioctl(fd, dmDevCreate, header(name, 0, 0, nil)); err != nil {
			return fmt.Errorf("create: %w", err)
		}
	case "load":
	default:
		return fmt.Errorf("unknown verb %q", verb)
	}
	spec, err := targetSpec(table)
	if err != nil {
		return err
	}
	if err := ioctl(fd, dmTableLoad, header(name, 0, 1, spec)); err != nil {
		return fmt.Errorf("table load: %w", err)
	}
	if verb == "load" {
		if err := ioctl(fd, dmDevSuspend, header(name, dmSuspendFlag|dmSkipLockfs, 0, nil)); err != nil {
			return fmt.Errorf("suspend: %w", err)
		}
	}
	// A resume makes the loaded table the live one.
	if err := ioctl(fd, dmDevSuspend, header(name, dmSkipLockfs, 0, nil)); err != nil {
		return fmt.Errorf("resume: %w", err)
	}
	return nil
}

// header is a struct dm_ioctl for name, followed by data.
func header(name string, flags uint32, targets uint32, data []byte) []byte {
	b := make([]byte, dmIoctlSize+len(data)+16*1024) // room for the kernel's answer
	le := binary.LittleEndian
	le.PutUint32(b[0:], 4) // version 4.0.0
	le.PutUint32(b[dmDataSizeAt:], uint32(len(b)))
	le.PutUint32(b[dmDataStartAt:], dmIoctlSize)
	le.PutUint32(b[dmTargetCountAt:], targets)
	le.PutUint32(b[dmFlagsAt:], flags)
	copy(b[dmNameOffset:dmNameOffset+127], name)
	copy(b[dmIoctlSize:], data)
	return b
}

// targetSpec is one struct dm_target_spec and its parameters.
func targetSpec(table string) ([]byte, error) {
	f := strings.Fields(table)
	if len(f) < 3 {
		return nil, fmt.Errorf("table %q: want start length target [args]", table)
	}
	start, err1 := strconv.ParseUint(f[0], 10, 64)
	length, err2 := strconv.ParseUint(f[1], 10, 64)
	if err1 != nil || err2 != nil || len(f[2]) > 15 {
		return nil, fmt.Errorf("table %q: bad start, length or target", table)
	}
	params := strings.Join(f[3:], " ")
	size := (dmSpecSize + len(params) + 1 + 7) &^ 7
	b := make([]byte, size)
	le := binary.LittleEndian
	le.PutUint64(b[0:], start)
	le.PutUint64(b[8:], length)
	le.PutUint32(b[20:], uint32(size)) // next: from this spec to the next
	copy(b[24:40], f[2])
	copy(b[dmSpecSize:], params)
	return b, nil
}

func ioctl(fd uintptr, req uintptr, b []byte) error {
	if _, _, e := syscall.Syscall(syscall.SYS_IOCTL, fd, req, uintptr(unsafe.Pointer(&b[0]))); e != 0 {
		return e
	}
	return nil
}
