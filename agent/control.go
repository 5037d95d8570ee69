package agent

import (
	"bufio"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"log/slog"
	"net"
	"os"
	"sync"
	"syscall"
	"time"

	"fieldlink/config"
	"fieldlink/downlink"
)

// ControlPath is the daemon's local socket, beside its buffer file: gateway
// write sends commands through it, so that a write takes its turn on the
// bus the daemon polls.
func ControlPath(c *config.Config) string { return c.Buffer.Path + ".sock" }

// controlTimeout bounds one exchange on the control socket.
const controlTimeout = downlink.WriteTimeout + 5*time.Second

// serveControl listens on path (mode 0600) and runs each command a local
// client sends, one JSON line each way: the command, then its result.
// Only root and the daemon's own user may connect.
func serveControl(path string, e *downlink.Engine, log *slog.Logger) (stop func(), err error) {
	if fi, err := os.Lstat(path); err == nil && fi.Mode()&os.ModeSocket != 0 {
		// Left by a daemon that did not stop cleanly: the buffer's lock,
		// held by now, says no other daemon runs.
		_ = os.Remove(path)
	}
	old := syscall.Umask(0o177)
	ln, err := net.Listen("unix", path)
	syscall.Umask(old)
	if err != nil {
		return nil, fmt.Errorf("control socket: %w", err)
	}
	if err := os.Chmod(path, 0o600); err != nil {
		ln.Close()
		return nil, fmt.Errorf("control socket: %w", err)
	}
	var wg sync.WaitGroup
	wg.Go(func() {
		for {
			c, err := ln.Accept()
			if err != nil {
				return
			}
			wg.Go(func() { handleControl(c.(*net.UnixConn), e, log) })
		}
	})
	return func() {
		ln.Close() // also removes the socket file
		wg.Wait()
	}, nil
}

func handleControl(c *net.UnixConn, e *downlink.Engine, log *slog.Logger) {
	defer c.Close()
	_ = c.SetDeadline(time.Now().Add(controlTimeout))
	if uid, err := peerUID(c); err != nil || (uid != 0 && uid != uint32(os.Getuid())) {
		log.Warn("control socket: connection refused: only root and the gateway's user may write", "uid", uid, "err", err)
		return
	}
	r := bufio.NewReader(c)
	line, err := r.ReadSlice('\n')
	if err != nil && !errors.Is(err, bufio.ErrBufferFull) {
		return
	}
	cmd, err := downlink.ParseCommand(line)
	var res downlink.Result
	if err != nil {
		res = downlink.Result{Status: downlink.StatusRejected, Reason: err.Error(), At: time.Now()}
	} else {
		res = e.RunLocal(context.Background(), cmd)
	}
	_, _ = c.Write(append(res.JSON(), '\n'))
}

// peerUID is the user id of the process at the other end of c.
func peerUID(c *net.UnixConn) (uint32, error) {
	raw, err := c.SyscallConn()
	if err != nil {
		return 0, err
	}
	var cred *syscall.Ucred
	var cerr error
	err = raw.Control(func(fd uintptr) {
		cred, cerr = syscall.GetsockoptUcred(int(fd), syscall.SOL_SOCKET, syscall.SO_PEERCRED)
	})
	if err == nil {
		err = cerr
	}
	if err != nil {
		return 0, err
	}
	return cred.Uid, nil
}

// SendCommand sends cmd to the daemon's control socket at path and returns
// its result. A daemon that does not run gives an error wrapping
// ErrNoDaemon.
func SendCommand(ctx context.Context, path string, cmd downlink.Command) (downlink.Result, error) {
	var d net.Dialer
	c, err := d.DialContext(ctx, "unix", path)
	if err != nil {
		if errors.Is(err, syscall.ENOENT) || errors.Is(err, syscall.ECONNREFUSED) {
			return downlink.Result{}, fmt.Errorf("%w (%s)", ErrNoDaemon, path)
		}
		return downlink.Result{}, err
	}
	defer c.Close()
	_ = c.SetDeadline(time.Now().Add(controlTimeout))
	if _, err := c.Write(append(cmd.JSON(), '\n')); err != nil {
		return downlink.Result{}, err
	}
	line, err := bufio.NewReader(c).ReadBytes('\n')
	if err != nil {
		return downlink.Result{}, fmt.Errorf("control socket %s: no result: %w", path, err)
	}
	var res downlink.Result
	if err := json.Unmarshal(line, &res); err != nil {
		return downlink.Result{}, fmt.Errorf("control socket %s: %w", path, err)
	}
	return res, nil
}

// ErrNoDaemon means no daemon listens on the control socket.
var ErrNoDaemon = errors.New("no gateway daemon is running")
