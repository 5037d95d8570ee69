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

	"fieldlink/buffer"
	"fieldlink/buffer/cardstore"
	"fieldlink/config"
	"fieldlink/downlink"
)

// ControlPath is the daemon's local socket, beside its buffer file: gateway
// write sends commands through it, so that a write takes its turn on the
// bus the daemon polls; gateway audit and buffer stats ask it what the
// buffer file, which the daemon holds, says.
func ControlPath(c *config.Config) string { return c.Buffer.Path + ".sock" }

// controlTimeout bounds one exchange on the control socket.
const controlTimeout = downlink.WriteTimeout + 5*time.Second

// controlStore is what the control socket reads of the daemon's buffer.
type controlStore interface {
	downlink.AuxReader
	Stats() (buffer.Stats, bool)
}

// serveControl listens on path (mode 0600) and runs each command a local
// client sends, one JSON line each way: the command, then its result; or
// a query ({"query":"..."}, see [Query]), then its answer. Only root and
// the daemon's own user may connect.
func serveControl(path string, e *downlink.Engine, q controlStore, log *slog.Logger) (stop func(), err error) {
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
			wg.Go(func() { handleControl(c.(*net.UnixConn), e, q, log) })
		}
	})
	return func() {
		ln.Close() // also removes the socket file
		wg.Wait()
	}, nil
}

func handleControl(c *net.UnixConn, e *downlink.Engine, q controlStore, log *slog.Logger) {
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
	var ask struct {
		Query Query `json:"query"`
	}
	if json.Unmarshal(line, &ask) == nil && ask.Query != "" {
		_, _ = c.Write(append(answer(ask.Query, q), '\n'))
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
	line, err := exchange(ctx, path, cmd.JSON())
	if err != nil {
		return downlink.Result{}, err
	}
	var res downlink.Result
	if err := json.Unmarshal(line, &res); err != nil {
		return downlink.Result{}, fmt.Errorf("control socket %s: %w", path, err)
	}
	return res, nil
}

// Query is what a command beside the daemon asks it on the control
// socket: what the buffer file says, read by the daemon that holds it.
type Query string

// Queries.
const (
	QueryBufferStats Query = "buffer-stats" // the buffer's statistics
	QueryAuditVerify Query = "audit-verify" // a check of the audit log's hash chains
	QueryAudit       Query = "audit"        // the audit and refusal logs' entries
)

// Answer is the daemon's answer to a [Query]: the field the query names,
// or Error.
type Answer struct {
	Stats    *buffer.Stats          `json:"stats,omitempty"`
	Volatile bool                   `json:"volatile,omitempty"` // Stats are the volatile buffer's: the card's is not open
	Audit    *downlink.AuditSummary `json:"audit,omitempty"`
	Entries  []AuditLine            `json:"entries,omitempty"`
	Error    string                 `json:"error,omitempty"`
}

// AuditLine is an entry of the audit log or, Refusal set, of the refusal
// log.
type AuditLine struct {
	Entry   downlink.AuditEntry `json:"entry"`
	Refusal bool                `json:"refusal,omitempty"`
}

// auditTries bounds the checks of a log the daemon may be writing: a
// command audited between a check's read of the log's head and its scan
// of the entries looks like a broken chain once, a broken chain every
// time.
const auditTries = 5

// answer is the JSON answer to query about q.
func answer(query Query, q controlStore) []byte {
	var a Answer
	switch query {
	case QueryBufferStats:
		st, ok := q.Stats()
		if ok {
			a.Stats = &st
			a.Volatile = !isCard(q)
		} else {
			a.Error = "the buffer is not open"
		}
	case QueryAuditVerify:
		var last string
		for range auditTries {
			sum, err := downlink.CheckAudit(q)
			if err == nil {
				a.Audit, a.Error = &sum, ""
				break
			}
			if err.Error() == last {
				break
			}
			last, a.Error = err.Error(), err.Error()
			time.Sleep(50 * time.Millisecond)
		}
	case QueryAudit:
		a.Entries = []AuditLine{}
		err := downlink.ReadAudit(q, func(e downlink.AuditEntry) error {
			a.Entries = append(a.Entries, AuditLine{Entry: e, Refusal: e.Refusal})
			return nil
		})
		if err != nil {
			a.Entries, a.Error = nil, err.Error()
		}
	default:
		a.Error = fmt.Sprintf("unknown query %q (this daemon is older than the command that asks it?)", query)
	}
	out, err := json.Marshal(a)
	if err != nil {
		out, _ = json.Marshal(Answer{Error: err.Error()})
	}
	return out
}

// isCard reports whether q's statistics are the card's buffer's.
func isCard(q controlStore) bool {
	s, ok := q.(interface{ Card() cardstore.Buffer })
	return !ok || s.Card() != nil
}

// Ask sends query to the daemon of c's site file on its control socket
// and returns its answer; an error wrapping ErrNoDaemon when none runs,
// one saying the answer's Error when it could not answer.
func Ask(ctx context.Context, c *config.Config, query Query) (Answer, error) {
	path := ControlPath(c)
	line, err := exchange(ctx, path, fmt.Appendf(nil, `{"query":%q}`, query))
	if err != nil {
		return Answer{}, err
	}
	var a Answer
	if err := json.Unmarshal(line, &a); err != nil {
		return Answer{}, fmt.Errorf("control socket %s: %w", path, err)
	}
	if a.Error != "" {
		return a, fmt.Errorf("the running gateway's buffer %s: %s", c.Buffer.Path, a.Error)
	}
	if a.Stats == nil && a.Audit == nil && a.Entries == nil {
		// A daemon from before queries answers with a refused command.
		return a, fmt.Errorf("the running gateway does not answer %s on %s (an older version?): %w", query, path, heldError{c})
	}
	return a, nil
}

// exchange sends one line on the control socket at path and reads one
// back.
func exchange(ctx context.Context, path string, line []byte) ([]byte, error) {
	var d net.Dialer
	c, err := d.DialContext(ctx, "unix", path)
	if err != nil {
		if errors.Is(err, syscall.ENOENT) || errors.Is(err, syscall.ECONNREFUSED) {
			return nil, fmt.Errorf("%w (%s)", ErrNoDaemon, path)
		}
		return nil, err
	}
	defer c.Close()
	deadline := time.Now().Add(controlTimeout)
	if d, ok := ctx.Deadline(); ok && d.Before(deadline) {
		deadline = d
	}
	_ = c.SetDeadline(deadline)
	if _, err := c.Write(append(line, '\n')); err != nil {
		return nil, err
	}
	out, err := bufio.NewReader(c).ReadBytes('\n')
	if err != nil {
		return nil, fmt.Errorf("control socket %s: no answer: %w", path, err)
	}
	return out, nil
}

// ErrNoDaemon means no daemon listens on the control socket.
var ErrNoDaemon = errors.New("no gateway daemon is running")
