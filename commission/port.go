package commission

import (
	"errors"
	"fmt"
	"io/fs"
	"net/url"
	"os"
	"os/user"
	"path/filepath"
	"slices"
	"strconv"
	"syscall"

	"golang.org/x/sys/unix"

	"fieldlink/config"
	"fieldlink/sensors"
)

// Access bits, as in a file's mode and access(2).
const (
	mayRead  = 4
	mayWrite = 2
	mayEnter = 1
)

// may reports whether w may access path (whose stat is fi) for want: the
// kernel answers for the user running the check; for another user the
// file's owner, group and mode do (ACLs aside).
func (w who) may(path string, fi fs.FileInfo, want uint32) bool {
	if w.self {
		return unix.Access(path, want) == nil
	}
	if w.uid == 0 {
		return true
	}
	st, ok := fi.Sys().(*syscall.Stat_t)
	if !ok {
		return false
	}
	perm := uint32(fi.Mode().Perm())
	switch {
	case int(st.Uid) == w.uid:
		perm >>= 6
	case slices.Contains(w.gids, int(st.Gid)):
		perm >>= 3
	}
	return perm&want == want
}

// owners names a file's owner, group and mode, as ls -l would.
func owners(fi fs.FileInfo) string {
	st, ok := fi.Sys().(*syscall.Stat_t)
	if !ok {
		return fi.Mode().String()
	}
	return fmt.Sprintf("owner %s, group %s, mode %s", userName(st.Uid), groupName(st.Gid), fi.Mode())
}

func userName(uid uint32) string {
	if u, err := user.LookupId(strconv.Itoa(int(uid))); err == nil {
		return u.Username
	}
	return strconv.Itoa(int(uid))
}

func groupName(gid uint32) string {
	if g, err := user.LookupGroupId(strconv.Itoa(int(gid))); err == nil {
		return g.Name
	}
	return strconv.Itoa(int(gid))
}

// port checks a serial port: it exists, is a character device, w may open
// it for reading and writing, and no other program holds it.
func (k *checker) port(what, path string) Row {
	fail := func(why string, args ...any) Row { return Row{what, false, fmt.Sprintf(why, args...)} }
	fi, err := os.Stat(path)
	switch {
	case errors.Is(err, fs.ErrNotExist):
		return fail("%s missing: is the adapter plugged in? (ls /dev/serial/by-id/ lists the adapters the system sees)", path)
	case err != nil:
		return fail("%s: %v", path, err)
	case fi.Mode()&fs.ModeCharDevice == 0:
		return fail("%s is not a serial device (it is a %s): check the bus's url", path, kind(fi))
	case !k.who.may(path, fi, mayRead|mayWrite):
		st, _ := fi.Sys().(*syscall.Stat_t)
		fix := "give the user access to it"
		if st != nil && st.Gid != 0 {
			g := groupName(st.Gid)
			fix = fmt.Sprintf("add the user to group %s (usermod -aG %s %s), then restart the service", g, g, k.who.name)
		}
		return fail("%s may not open %s (%s): %s", k.who.name, path, owners(fi), fix)
	}
	fd, err := unix.Open(path, unix.O_RDWR|unix.O_NOCTTY|unix.O_NONBLOCK|unix.O_CLOEXEC, 0)
	if err != nil {
		// The kinds the daemon gives a port that does not open.
		switch sensors.PortErrorOf(path, err).Kind {
		case sensors.PortBusy:
			return fail("%s", k.busy(path))
		case sensors.PortMissing:
			return fail("%s is there but its adapter is gone: unplug it and plug it in again", path)
		case sensors.PortForbidden:
			return fail("%s may not open %s (%s): add the user to the port's group, then restart the service", k.who.name, path, owners(fi))
		}
		return fail("%s does not open: %v", path, err)
	}
	defer unix.Close(fd)
	// Root opens a port another program made exclusive (TIOCEXCL, as the
	// gateway and most serial programs do): ask the port itself.
	if excl, err := unix.IoctlGetInt(fd, unix.TIOCGEXCL); err == nil && excl != 0 {
		return fail("%s", k.busy(path))
	}
	if err := unix.Flock(fd, unix.LOCK_EX|unix.LOCK_NB); errors.Is(err, unix.EWOULDBLOCK) {
		return fail("%s", k.busy(path))
	} else if err == nil {
		_ = unix.Flock(fd, unix.LOCK_UN)
	}
	return Row{what, true, fmt.Sprintf("%s is there, %s may open it, and it is free", path, k.who.name)}
}

// busy says that another program holds path.
func (k *checker) busy(path string) string {
	if k.daemon {
		return fmt.Sprintf("%s busy: the running gateway holds it; stop it to check the port (systemctl stop fieldlink)", path)
	}
	return fmt.Sprintf("%s busy: another program holds it (a modem manager, a terminal program, another gateway): fuser -v %s names it; stop it", path, path)
}

// kind names what a file is, for a port that is not a character device.
func kind(fi fs.FileInfo) string {
	switch m := fi.Mode(); {
	case m.IsDir():
		return "directory"
	case m.IsRegular():
		return "regular file"
	case m&fs.ModeDevice != 0:
		return "block device"
	case m&fs.ModeSocket != 0:
		return "socket"
	case m&fs.ModeNamedPipe != 0:
		return "named pipe"
	}
	return fi.Mode().Type().String()
}

// serialSensor checks a serial sensor's port; its lines are not read.
func (k *checker) serialSensor(s config.SerialSensor) Row {
	what := "serial sensor " + s.Name + ": port"
	u, err := url.Parse(s.URL)
	if err != nil || u.Path == "" {
		return Row{what, false, "its url names no port: " + s.URL}
	}
	return k.port(what, u.Path)
}

// bufferDir checks that the buffer's directory exists and w may create
// files in it, and that w may read and write the buffer file, if there.
func (k *checker) bufferDir() Row {
	path := k.c.Buffer.Path
	dir := filepath.Dir(path)
	what := "buffer directory " + dir
	fail := func(why string, args ...any) Row { return Row{what, false, fmt.Sprintf(why, args...)} }
	fi, err := os.Stat(dir)
	switch {
	case errors.Is(err, fs.ErrNotExist):
		return fail("%s missing: create it for the service (install -d -o %s -g %s %s), or set buffer.path in %s to a directory that exists", dir, k.who.name, k.who.name, dir, k.c.File)
	case err != nil:
		return fail("%s: %v", dir, err)
	case !fi.IsDir():
		return fail("%s is not a directory: set buffer.path in %s", dir, k.c.File)
	case !k.who.may(dir, fi, mayWrite|mayEnter):
		return fail("%s may not create files in %s (%s): chown %s %s, or set buffer.path in %s", k.who.name, dir, owners(fi), k.who.name, dir, k.c.File)
	}
	if fi, err := os.Stat(path); err == nil && !k.who.may(path, fi, mayRead|mayWrite) {
		return fail("%s may not read and write the buffer %s (%s): chown %s %s", k.who.name, path, owners(fi), k.who.name, path)
	}
	return Row{what, true, fmt.Sprintf("%s is there and %s may write in it", dir, k.who.name)}
}

// readable checks that w may read a file the site file names (a password,
// a token, a certificate); "" when it may.
func (k *checker) readable(field, path string) string {
	path = k.c.Rel(path)
	fi, err := os.Stat(path)
	switch {
	case err != nil:
		return fmt.Sprintf("%s %s: %v", field, path, err)
	case !k.who.may(path, fi, mayRead):
		return fmt.Sprintf("%s may not read %s %s (%s)", k.who.name, field, path, owners(fi))
	}
	return ""
}
