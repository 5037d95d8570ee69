package modbus

import (
	"context"
	"errors"
	"net"
	"os"
	"time"
)

// setReadDeadline sets the link's read deadline and then reports whether
// ctx has ended: a cancellation that raced with this call may have had its
// "deadline now" overwritten, and must not be lost.
func setReadDeadline(ctx context.Context, link Link, d time.Time) error {
	if err := link.SetReadDeadline(d); err != nil {
		return err
	}
	return ctx.Err()
}

// abandonOnCancel makes a Read blocked on link return as soon as ctx ends,
// by moving its deadline to now. The returned func stops watching and waits
// until a deadline change in progress is done, so that it cannot land on
// the next request.
func abandonOnCancel(ctx context.Context, link Link) (stop func()) {
	if ctx.Done() == nil {
		return func() {}
	}
	done := make(chan struct{})
	stopWatch := context.AfterFunc(ctx, func() {
		defer close(done)
		if c, ok := link.(interface{ SetDeadline(time.Time) error }); ok {
			_ = c.SetDeadline(time.Now())
			return
		}
		_ = link.SetReadDeadline(time.Now())
	})
	return func() {
		if !stopWatch() {
			<-done
		}
	}
}

// ctxErrNow is ctx.Err(), except that it already reports
// context.DeadlineExceeded when ctx's deadline has passed but its timer has
// not fired yet: a link deadline set to the same instant often wins that race.
func ctxErrNow(ctx context.Context) error {
	if err := ctx.Err(); err != nil {
		return err
	}
	if d, ok := ctx.Deadline(); ok && !time.Now().Before(d) {
		return context.DeadlineExceeded
	}
	return nil
}

// isTimeout reports whether err is a deadline expiring on a link.
func isTimeout(err error) bool {
	if errors.Is(err, os.ErrDeadlineExceeded) {
		return true
	}
	var ne net.Error
	return errors.As(err, &ne) && ne.Timeout()
}
