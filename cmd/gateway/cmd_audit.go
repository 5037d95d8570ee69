package main

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"

	"fieldlink/agent"
	"fieldlink/downlink"
)

// cmdAudit is "gateway audit -c site.yaml [-verify] [-json]": the
// downlink's audit log and its refusal log (commands refused before they
// were taken up, numbered r1, r2, …), kept in the buffer file, one line
// per entry in order of time; or, with -verify, a check of both hash
// chains that says how many old entries each log's bound trimmed. A
// running gateway holds the buffer file: it is asked through its control
// socket. A missing file is not created: the command says so and exits 1.
func cmdAudit(ctx context.Context, args []string, stdout, stderr io.Writer) (err error) {
	fs := flags("audit", stderr)
	file := fs.String("c", "", "site file (its buffer.path holds the audit log)")
	verify := fs.Bool("verify", false, "check the hash chains of the audit and refusal logs instead of printing them, and say how many old entries were trimmed; exit 1 naming the first broken entry")
	asJSON := fs.Bool("json", false, "print each entry as stored, one JSON object a line (its hash: SHA-256 of the previous hash's 32 bytes and the line without its \",\"hash\":...\" member)")
	if err := parse(fs, args); err != nil {
		return err
	}
	c, err := loadConfig(*file, stderr)
	if err != nil {
		printErr(stderr, err)
		return errSilent
	}
	query := agent.QueryAudit
	if *verify {
		query = agent.QueryAuditVerify
	}
	if a, err := agent.Ask(ctx, c, query); !errors.Is(err, agent.ErrNoDaemon) {
		if err != nil {
			return err
		}
		if *verify {
			fmt.Fprintf(stdout, "audit log of %s: %s\n", c.Buffer.Path, a.Audit)
			return nil
		}
		for _, l := range a.Entries {
			l.Entry.Refusal = l.Refusal
			if err := printAuditEntry(stdout, l.Entry, *asJSON); err != nil {
				return err
			}
		}
		return nil
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

	if *verify {
		sum, err := downlink.CheckAudit(q)
		if err != nil {
			return fmt.Errorf("%s: %w", c.Buffer.Path, err)
		}
		fmt.Fprintf(stdout, "audit log of %s: %s\n", c.Buffer.Path, sum)
		return nil
	}
	return downlink.ReadAudit(q, func(e downlink.AuditEntry) error {
		return printAuditEntry(stdout, e, *asJSON)
	})
}

// printAuditEntry prints e as a line of text or, asJSON, as stored.
func printAuditEntry(w io.Writer, e downlink.AuditEntry, asJSON bool) error {
	line := []byte(e.String())
	if asJSON {
		var err error
		if line, err = json.Marshal(e); err != nil {
			return err
		}
	}
	_, err := w.Write(append(line, '\n'))
	return err
}
