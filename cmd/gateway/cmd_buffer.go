package main

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"text/tabwriter"
	"time"

	"fieldlink/agent"
	"fieldlink/buffer"
)

// cmdBuffer is "gateway buffer stats|export|purge -c FILE". The buffer file
// is locked by a running gateway: stats asks it through its control
// socket; export and purge, which need the file, ask to stop it first. A
// missing file is not created: there is nothing to show or purge.
func cmdBuffer(ctx context.Context, args []string, stdout, stderr io.Writer) (err error) {
	if len(args) == 0 || (args[0] != "stats" && args[0] != "export" && args[0] != "purge") {
		fmt.Fprintln(stderr, "usage: gateway buffer stats|export|purge -c site.yaml")
		return errUsage
	}
	sub := args[0]
	fs := flags("buffer "+sub, stderr)
	file := fs.String("c", "", "site file (its buffer.path is the buffer)")
	yes := fs.Bool("yes", false, "purge: really delete every queued packet")
	dead := fs.Bool("dead", false, "export or purge the dead letters (packets an upstream refused for good) instead of the queue")
	if err := parse(fs, args[1:]); err != nil {
		return err
	}
	c, err := loadConfig(*file, stderr)
	if err != nil {
		printErr(stderr, err)
		return errSilent
	}
	if sub == "purge" && !*yes {
		return fmt.Errorf("purge deletes every packet waiting in %s; run again with -yes to do it", c.Buffer.Path)
	}
	if sub == "stats" {
		a, err := agent.Ask(ctx, c, agent.QueryBufferStats)
		if !errors.Is(err, agent.ErrNoDaemon) {
			if err != nil {
				return err
			}
			from := "the running daemon (its control socket " + agent.ControlPath(c) + ")"
			if a.Volatile {
				from += ": its volatile buffer in memory, the card's is not open"
			}
			return printStats(stdout, c.Buffer.Path, *a.Stats, from)
		}
	}
	q, done, err := agent.OpenStoppedBuffer(c, stderr)
	if err != nil {
		return err
	}
	defer func() {
		if derr := done(); err == nil {
			err = derr
		}
	}()
	switch sub {
	case "stats":
		return printStats(stdout, c.Buffer.Path, q.Stats(), "the file (no daemon runs)")
	case "export":
		if *dead {
			// One JSON object a line: the reason, then the packet as sent.
			return q.EachDead(func(r buffer.Record, reason string) error {
				why, _ := json.Marshal(reason)
				line := fmt.Appendf(nil, `{"reason":%s,"packet":%s}`+"\n", why, r.Data)
				_, err := stdout.Write(line)
				return err
			})
		}
		return q.Each(func(r buffer.Record) error {
			_, err := stdout.Write(append(r.Data, '\n'))
			return err
		})
	default:
		what, purge := "packets", q.Purge
		if *dead {
			what, purge = "dead letters", q.PurgeDead
		}
		n, err := purge()
		if err != nil {
			return err
		}
		fmt.Fprintf(stderr, "purged %d %s from %s (sequence numbers continue)\n", n, what, c.Buffer.Path)
		return nil
	}
}

// printStats prints a buffer's statistics, one row each, and whom they
// were read from.
func printStats(w io.Writer, path string, st buffer.Stats, from string) error {
	tw := tabwriter.NewWriter(w, 0, 4, 2, ' ', 0)
	row := func(k string, v any) { fmt.Fprintf(tw, "%s\t%v\n", k, v) }
	row("file", path)
	row("read from", from)
	row("epoch", st.Epoch)
	row("depth", fmt.Sprintf("%d (%d alarms, %d normal)", st.Alarms+st.Normal, st.Alarms, st.Normal))
	row("bytes", fmt.Sprintf("%d of %d", st.Bytes, st.MaxBytes))
	row("file size", st.FileSize)
	if st.OldestSeq != 0 {
		row("oldest", fmt.Sprintf("seq %d at %s", st.OldestSeq, st.OldestAt.UTC().Format(time.RFC3339)))
		row("newest", fmt.Sprintf("seq %d at %s", st.NewestSeq, st.NewestAt.UTC().Format(time.RFC3339)))
	}
	row("last seq", st.LastSeq)
	row("evicted (max_bytes)", st.EvictedMaxBytes)
	row("evicted (max_age)", st.EvictedMaxAge)
	row("rejected (full)", st.RejectedFull)
	row("corrupt records", st.Corrupt)
	row("salvages", fmt.Sprintf("%d (%d records lost)", st.Salvages, st.SalvageLost))
	row("compactions", st.Compactions)
	row("dead letters", fmt.Sprintf("%d kept (%d bytes), %d ever, %d dropped (gateway buffer export -dead)", st.DeadDepth, st.DeadBytes, st.DeadLetters, st.DeadDropped))
	if st.LastError != "" {
		row("last error", st.LastError)
	}
	return tw.Flush()
}
