package sensors

import (
	"context"
	"log/slog"
	"time"
)

// Defaults of the failure streak, shared by buses and serial sensors.
const (
	defaultOfflineAfter = 3
	// defaultBusBackoff caps the delay between polls of a failing Modbus
	// device: a poll costs its neighbours bus time.
	defaultBusBackoff = 5 * time.Minute
	// defaultLineBackoff caps the delay between reopening the port of a
	// failing serial sensor: it has its port to itself.
	defaultLineBackoff = time.Minute
	// repeatLogEvery rate-limits the log of a device that goes on failing.
	repeatLogEvery = time.Minute
)

// streak follows one device's run of failed attempts: it sets the device's
// health, says how long to back off, and decides what to log. Buses and
// serial sensors share it, so that a device is degraded, offline, backed off
// and logged alike whatever its transport.
type streak struct {
	offlineAfter int           // failures in a row that make a device Offline
	maxBackoff   time.Duration // cap of backoff

	fails    int // failures in a row; 0 after a success
	lastLog  time.Time
	suppress int // failures not logged since lastLog
}

// newStreak applies the defaults to zero settings.
func newStreak(offlineAfter int, maxBackoff, defaultBackoff time.Duration) streak {
	if offlineAfter <= 0 {
		offlineAfter = defaultOfflineAfter
	}
	if maxBackoff <= 0 {
		maxBackoff = defaultBackoff
	}
	return streak{offlineAfter: offlineAfter, maxBackoff: maxBackoff}
}

// record counts in st an attempt that ended at now with err (nil: a
// reading) and returns the log line it calls for: every change of health,
// and a device that goes on failing at most once a minute. The caller holds
// whatever guards st, and logs after releasing it.
func (s *streak) record(st *DeviceStatus, now time.Time, err error) logLine {
	prev := st.Health
	st.Polls++
	if err == nil {
		s.fails, st.ConsecutiveFailures = 0, 0
		st.Health, st.LastOK, st.LastError, st.Failure = OK, now, "", Failure{}
		if prev != OK && prev != Unknown {
			return logLine{slog.LevelInfo, "device answering again", []any{"health", OK, "was", prev}}
		}
		return logLine{}
	}
	s.fails++
	st.ConsecutiveFailures = s.fails
	st.Errors++
	st.LastError = err.Error()
	st.Failure = FailureOf(err)
	st.Health = Degraded
	if s.fails >= s.offlineAfter {
		st.Health = Offline
	}
	switch {
	case st.Health != prev:
		s.lastLog, s.suppress = now, 0
		return logLine{slog.LevelWarn, "device not answering", []any{"health", st.Health, "failures", s.fails, "err", err}}
	case now.Sub(s.lastLog) >= repeatLogEvery:
		l := logLine{slog.LevelWarn, "device still failing", []any{"health", st.Health, "failures", s.fails, "suppressed", s.suppress, "err", err}}
		s.lastLog, s.suppress = now, 0
		return l
	}
	s.suppress++
	return logLine{}
}

// backoff is the delay before the next attempt after the current run of
// failures: base·2^(fails-1), capped.
func (s *streak) backoff(base time.Duration) time.Duration {
	if shift := max(s.fails-1, 0); shift < 30 && base<<shift < s.maxBackoff {
		return base << shift
	}
	return s.maxBackoff
}

// logLine is a log record decided under a lock and written after it.
type logLine struct {
	level slog.Level
	msg   string
	args  []any
}

func (l logLine) to(log *slog.Logger) {
	if l.msg != "" {
		log.Log(context.Background(), l.level, l.msg, l.args...)
	}
}
