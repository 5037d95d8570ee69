package agent

import (
	"errors"
	"fmt"
	"io"
	"io/fs"
	"log/slog"
	"os"
	"os/user"
	"path/filepath"
	"strconv"
	"syscall"

	"fieldlink/buffer"
	"fieldlink/buffer/cardstore"
	"fieldlink/config"
)

// ServiceUser is the user the Debian package creates and runs the service
// as.
const ServiceUser = "fieldlink"

// UnsafeNoSyncEnv names the environment variable that, set to 1, turns the
// buffer's fsync off (buffer.Options.UnsafeNoSync), loudly: the control run
// of the power cut tests (tests/powercut), which must lose packets.
const UnsafeNoSyncEnv = "FIELDLINK_UNSAFE_NOSYNC"

// OpenBuffer opens a site's buffer with its configured policies. Run as
// root, the directories it creates for the file and the files created in
// its directory take the service's owner (see [OpenStoppedBuffer]).
func OpenBuffer(c *config.Config, log *slog.Logger) (*buffer.Buffer, error) {
	q, _, err := openBuffer(c, log)
	return q, err
}

// openBuffer is OpenBuffer; adopt gives the files created in the buffer's
// directory since to the service's owner: a command runs it again once it
// has closed the buffer.
func openBuffer(c *config.Config, log *slog.Logger) (q *buffer.Buffer, adopt func() error, err error) {
	adopt, err = forService(c.Buffer.Path)
	if err != nil {
		return nil, nil, fmt.Errorf("buffer %s: %w", c.Buffer.Path, err)
	}
	q, err = buffer.Open(c.Buffer.Path, bufferOptions(c, log))
	aerr := adopt()
	if errors.Is(err, fs.ErrPermission) {
		return nil, nil, fmt.Errorf("buffer %s: %w (set buffer.path in %s to a file this user may create, such as ./buffer.db to try it out; the installed service runs as the %s user, which owns /var/lib/fieldlink)", c.Buffer.Path, err, c.File, ServiceUser)
	}
	if err != nil {
		return nil, nil, fmt.Errorf("buffer %s: %w", c.Buffer.Path, err)
	}
	if aerr != nil {
		q.Close()
		return nil, nil, fmt.Errorf("buffer %s: %w", c.Buffer.Path, aerr)
	}
	return q, adopt, nil
}

// openStore opens a site's buffer (as OpenBuffer) with its fallback for a
// failing card (see [cardstore]): a card that fails with an I/O error, a
// read-only or a full file system starts the gateway without it, not
// durable, and is tried again on a backoff.
func openStore(c *config.Config, log *slog.Logger) (*cardstore.Store, error) {
	return cardstore.Open(cardstore.Options{
		Path: c.Buffer.Path, Buffer: bufferOptions(c, log),
		OpenCard: func() (cardstore.Buffer, error) {
			q, _, err := openBuffer(c, log)
			if err != nil {
				return nil, err
			}
			return q, nil
		},
		Logger: log.With("component", "buffer"),
	})
}

// bufferOptions are the buffer options of c's site file.
func bufferOptions(c *config.Config, log *slog.Logger) buffer.Options {
	opt := buffer.Options{
		SyncEvery:  c.Buffer.SyncEvery,
		MaxBytes:   int64(c.Buffer.MaxBytes),
		MaxAge:     c.Buffer.MaxAge,
		Values:     c.Packet.Values,
		Durability: c.Buffer.Durability,
		WhenFull:   c.Buffer.WhenFull,
		Order:      c.Buffer.Order,
		Logger:     log.With("component", "buffer"),
	}
	if os.Getenv(UnsafeNoSyncEnv) == "1" {
		opt.UnsafeNoSync = true
		log.Error("UNSAFE: "+UnsafeNoSyncEnv+"=1 turns the buffer's fsync off: a power cut loses packets counted as stored. It is the power cut tests' control; never set it in the field",
			"path", c.Buffer.Path)
	}
	return opt
}

// OpenStoppedBuffer opens a site's buffer for a command run beside a
// stopped gateway (buffer, audit): its warnings go to stderr, and a file
// the running gateway holds is refused with what to do. A file that does
// not exist is not created, nor its directory: the error says so and
// wraps fs.ErrNotExist. done closes the buffer and, run as root, gives
// what the buffer package made in its directory meanwhile (a salvaged
// file, a compacted one) to the service's owner.
func OpenStoppedBuffer(c *config.Config, stderr io.Writer) (q *buffer.Buffer, done func() error, err error) {
	if _, err := os.Stat(c.Buffer.Path); errors.Is(err, fs.ErrNotExist) {
		return nil, nil, fmt.Errorf("no buffer file at %s: nothing to read, and nothing was created (the gateway makes it at its first start): %w", c.Buffer.Path, fs.ErrNotExist)
	}
	q, adopt, err := openBuffer(c, slog.New(slog.NewTextHandler(stderr, &slog.HandlerOptions{Level: slog.LevelWarn})))
	if errors.Is(err, buffer.ErrLocked) {
		return nil, nil, heldError{c}
	}
	if err != nil {
		return nil, nil, err
	}
	return q, func() error {
		err := q.Close()
		if aerr := adopt(); err == nil {
			err = aerr
		}
		return err
	}, nil
}

// heldError is a stopped gateway's command refused because a running
// gateway holds the buffer: it says where the figures are meanwhile.
type heldError struct{ c *config.Config }

func (e heldError) Error() string {
	meanwhile := ""
	if l := e.c.Metrics.Listen; l != "off" {
		meanwhile = fmt.Sprintf(" Its figures are on its status page meanwhile: curl -s http://%s/status.json.", l)
	}
	return fmt.Sprintf("the gateway is running: it holds %s, which one process opens at a time.%s To read or change the file here, stop it first (systemctl stop fieldlink)", e.c.Buffer.Path, meanwhile)
}

func (heldError) Unwrap() error { return buffer.ErrLocked }

// forService prepares the directory of path, the buffer file, for a
// process running as root: the directories it lacks are created (0750)
// for the service's owner ([serviceOwner]), and adopt gives the entries
// created in it since, by root, to that owner, so that the service, as its
// own user, can open them. Not root, or with no owner but root, there is
// nothing to do.
func forService(path string) (adopt func() error, err error) {
	nothing := func() error { return nil }
	if os.Geteuid() != 0 {
		return nothing, nil
	}
	uid, gid, ok, err := serviceOwner(path, user.Lookup)
	if err != nil || !ok {
		return nothing, err
	}
	chown := func(p string) error {
		if err := os.Lchown(p, uid, gid); err != nil {
			return fmt.Errorf("created as root for the service, but cannot give %s to its owner %d:%d: %w", p, uid, gid, err)
		}
		return nil
	}
	dir := filepath.Dir(path)
	var missing []string
	for d := dir; ; d = filepath.Dir(d) {
		if _, err := os.Lstat(d); err == nil {
			break
		} else if !errors.Is(err, fs.ErrNotExist) {
			return nil, err
		}
		missing = append(missing, d)
		if filepath.Dir(d) == d {
			break
		}
	}
	for i := len(missing) - 1; i >= 0; i-- {
		if err := os.Mkdir(missing[i], 0o750); err != nil && !errors.Is(err, fs.ErrExist) {
			return nil, err
		}
		if err := chown(missing[i]); err != nil {
			return nil, err
		}
	}
	entries, err := os.ReadDir(dir)
	if err != nil {
		return nil, err
	}
	before := map[string]bool{}
	for _, e := range entries {
		before[e.Name()] = true
	}
	return func() error {
		entries, err := os.ReadDir(dir)
		if err != nil {
			return err
		}
		for _, e := range entries {
			p := filepath.Join(dir, e.Name())
			if before[e.Name()] || ownerOf(p) != 0 {
				continue
			}
			if err := chown(p); err != nil && !errors.Is(err, fs.ErrNotExist) {
				return err
			}
		}
		return nil
	}, nil
}

// serviceOwner returns who the files a process running as root creates for
// the service at path are to belong to: the owner of the nearest existing
// directory above path when that is not root (the package's state
// directory, or a user's own), else the service's user ([ServiceUser],
// looked up with lookup) when it exists. ok is false when neither (nor a
// user database to look it up in): the service then runs as root.
func serviceOwner(path string, lookup func(string) (*user.User, error)) (uid, gid int, ok bool, err error) {
	for d := filepath.Dir(path); ; d = filepath.Dir(d) {
		fi, err := os.Stat(d)
		if err == nil {
			st, isUnix := fi.Sys().(*syscall.Stat_t)
			if isUnix && st.Uid != 0 {
				return int(st.Uid), int(st.Gid), true, nil
			}
			break
		}
		if !errors.Is(err, fs.ErrNotExist) {
			return 0, 0, false, err
		}
		if filepath.Dir(d) == d {
			break
		}
	}
	u, err := lookup(ServiceUser)
	if err != nil {
		var unknown user.UnknownUserError
		if errors.As(err, &unknown) || errors.Is(err, fs.ErrNotExist) {
			// No such user, or no user database at all (a minimal
			// image without /etc/passwd, which the static build reads):
			// there is no service's user, the service runs as root.
			return 0, 0, false, nil
		}
		return 0, 0, false, fmt.Errorf("the service's user %s: %w", ServiceUser, err)
	}
	uid, err1 := strconv.Atoi(u.Uid)
	gid, err2 := strconv.Atoi(u.Gid)
	if err1 != nil || err2 != nil {
		return 0, 0, false, fmt.Errorf("the service's user %s: uid %q, gid %q: not numbers", ServiceUser, u.Uid, u.Gid)
	}
	return uid, gid, true, nil
}

// ownerOf is the uid of the file at p, not following a symbolic link; -1
// when it cannot be read.
func ownerOf(p string) int {
	fi, err := os.Lstat(p)
	if err != nil {
		return -1
	}
	st, ok := fi.Sys().(*syscall.Stat_t)
	if !ok {
		return -1
	}
	return int(st.Uid)
}
