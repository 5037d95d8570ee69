package downlink

import (
	"context"
	"log/slog"

	"fieldlink/packet"
)

// refused audits and reports a command refused before its id was kept;
// buffered sends its record upstream too.
func (e *Engine) refused(cmd *Command, res Result, buffered bool) {
	if err := e.opt.Ledger.Refused(cmd, res); err != nil {
		e.opt.Log.Error("refused command not recorded in the audit log", "id", res.ID, "err", err)
	}
	e.report(cmd, res, buffered)
}

// report publishes, counts and (for a command with an id kept) buffers a
// result, and logs it for the technician.
func (e *Engine) report(cmd *Command, res Result, buffered bool) {
	e.mu.Lock()
	e.counts[res.Status]++
	rec := Recent{Result: res}
	if cmd != nil {
		rec.Device, rec.Point = cmd.Device, cmd.Point
	}
	e.recent = append(e.recent, rec)
	if len(e.recent) > recentKept {
		e.recent = e.recent[1:]
	}
	e.mu.Unlock()
	args := []any{"id", res.ID, "status", res.Status}
	if cmd != nil {
		args = append(args, "device", cmd.Device, "point", cmd.Point, "value", cmd.Value.String(), "actor", cmd.Actor)
	}
	if res.Reason != "" {
		args = append(args, "reason", res.Reason)
	}
	level := slog.LevelInfo
	if res.Status != StatusDone {
		level = slog.LevelWarn
	}
	e.opt.Log.Log(context.Background(), level, "command", args...)
	if e.opt.Publish != nil {
		e.opt.Publish(res)
	}
	if buffered && cmd != nil && e.opt.Emit != nil {
		e.opt.Emit(recordOf(cmd, res))
	}
}

// recordOf is the packet that carries a command and its outcome upstream,
// through the buffer, so the platform's record survives outages.
func recordOf(cmd *Command, res Result) *packet.Packet {
	f := []packet.Field{
		{Name: "CommandId", Value: packet.String(cmd.ID)},
		{Name: "Point", Value: packet.String(cmd.Point)},
		{Name: "Value", Value: packet.String(cmd.Value.String())},
		{Name: "Status", Value: packet.String(string(res.Status))},
		{Name: "Readback", Value: packet.String(res.Readback.String())},
		{Name: "Actor", Value: packet.String(cmd.Actor)},
		{Name: "Reason", Value: packet.String(res.Reason)},
	}
	return &packet.Packet{At: res.At, DeviceID: cmd.Device, DataType: commandDataType, Fields: f}
}
