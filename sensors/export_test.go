package sensors

import (
	"context"
	"time"
)

// SetSleep replaces the wait of l between reopening its port.
func (l *SerialSensor) SetSleep(f func(ctx context.Context, d time.Duration) bool) { l.sleep = f }
