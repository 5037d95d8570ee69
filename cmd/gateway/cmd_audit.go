package main

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"os"
	"strings"
	"time"

	"fieldlink/agent"
	"fieldlink/buffer"
	"fieldlink/downlink"
)

// cmdAudit is "gateway audit -c site.yaml [-verify] [-json]": the
// downlink's audit log, kept in the buffer file, one line per entry; or,
// with -verify, a check of its hash chain. The buffer file is locked by a
// running gateway: stop it first (the command says so).
func cmdAudit(_ context.Context, args []string, stdout, stderr io.Writer) error {
	fs := flags("audit", stderr)
	file := fs.String("c", "", "site file (its buffer.path holds the audit log)")
	verify := fs.Bool("verify", false, "check the log's hash chain instead of printing it; exit 1 naming the first broken entry")
	asJSON := fs.Bool("json", false, "print each entry as stored, one JSON object a line (its hash: SHA-256 of the previous hash's 32 bytes and the line without its \",\"hash\":...\" member)")
	if err := parse(fs, args); err != nil {
		return err
	}
	c, err := loadConfig(*file, stderr)
	if err != nil {
		printErr(stderr, err)
		return errSilent
	}
	if _, err := os.Stat(c.Buffer.Path); errors.Is(err, os.ErrNotExist) {
		return fmt.Errorf("no buffer file at %s: the gateway has recorded no commands there", c.Buffer.Path)
	}
	log := slog.New(slog.NewTextHandler(stderr, &slog.HandlerOptions{Level: slog.LevelWarn}))
	q, err := agent.OpenBuffer(c, log)
	if errors.Is(err, buffer.ErrLocked) {
		return fmt.Errorf("%w: the gateway is running and holds the file; stop it first (systemctl stop fieldlink)", err)
	}
	if err != nil {
		return err
	}
	defer q.Close()

	if *verify {
		var n int
		var first, last uint64
		if err := downlink.ReadAudit(q, func(e downlink.AuditEntry) error {
			if n == 0 {
				first = e.Seq
			}
			n, last = n+1, e.Seq
			return nil
		}); err != nil {
			return err
		}
		if err := downlink.VerifyAudit(q); err != nil {
			return fmt.Errorf("%s: %w", c.Buffer.Path, err)
		}
		if n == 0 {
			fmt.Fprintf(stdout, "audit log of %s: empty\n", c.Buffer.Path)
			return nil
		}
		fmt.Fprintf(stdout, "audit log of %s: ok, entries %d to %d (%d), every hash and link checks out\n", c.Buffer.Path, first, last, n)
		return nil
	}
	return downlink.ReadAudit(q, func(e downlink.AuditEntry) error {
		var line []byte
		if *asJSON {
			line, err = json.Marshal(e)
			if err != nil {
				return err
			}
		} else {
			line = []byte(auditLine(e))
		}
		_, err := stdout.Write(append(line, '\n'))
		return err
	})
}

// auditLine is one entry for a person: seq, time, kind, then what the
// command asked and what became of it.
func auditLine(e downlink.AuditEntry) string {
	var b strings.Builder
	fmt.Fprintf(&b, "%6d  %s  %-9s", e.Seq, e.At.UTC().Format(time.RFC3339), e.Kind)
	if c := e.Command; c != nil {
		fmt.Fprintf(&b, "  %s  %s.%s = %s", c.ID, c.Device, c.Point, c.Value)
		if !c.ExpiresAt.IsZero() {
			fmt.Fprintf(&b, "  expires %s", c.ExpiresAt)
		}
		if c.Actor != "" {
			fmt.Fprintf(&b, "  by %s", c.Actor)
		}
		if c.Signature != "" {
			b.WriteString("  signed")
		}
	} else if e.Result != nil && e.Result.ID != "" {
		fmt.Fprintf(&b, "  %s", e.Result.ID)
	}
	if r := e.Result; r != nil {
		fmt.Fprintf(&b, "  → %s", r.Status)
		if r.Reason != "" {
			fmt.Fprintf(&b, ": %s", r.Reason)
		}
		if !r.Readback.IsZero() {
			fmt.Fprintf(&b, "  readback %s", r.Readback)
		}
	}
	if e.Note != "" {
		fmt.Fprintf(&b, "  %s", e.Note)
	}
	return b.String()
}
