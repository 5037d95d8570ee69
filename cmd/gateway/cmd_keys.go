package main

import (
	"context"
	"crypto/ed25519"
	"fmt"
	"io"
	"os"

	"fieldlink/downlink"
	"fieldlink/internal/signing"
)

// stdin is what "gateway command sign" reads, and where init asks before
// overwriting; tests replace it.
var stdin io.Reader = os.Stdin

// cmdKeygen is "gateway keygen -o NAME": a new Ed25519 key pair, NAME.key
// (private, mode 0600) and NAME.pub, neither overwritten.
func cmdKeygen(_ context.Context, args []string, stdout, stderr io.Writer) error {
	fs := flags("keygen", stderr)
	name := fs.String("o", "", "write NAME.key (private, mode 0600) and NAME.pub; refuses to overwrite")
	if err := parse(fs, args); err != nil {
		return err
	}
	if *name == "" {
		fmt.Fprintln(stderr, "give -o NAME: the key pair is written as NAME.key and NAME.pub")
		return errUsage
	}
	pub, err := signing.GenerateFiles(*name)
	if err != nil {
		return err
	}
	fmt.Fprintf(stdout, "wrote %s (private: it signs; keep it where commands are issued, mode 0600)\n", *name+signing.PrivateSuffix)
	fmt.Fprintf(stdout, "wrote %s (public, key id %s: give it to the gateways that are to trust it)\n", *name+signing.PublicSuffix, signing.KeyID(pub))
	return nil
}

// cmdCommand is "gateway command sign -key NAME.key": a downlink command's
// JSON on stdin, the same command signed on stdout, one line.
func cmdCommand(_ context.Context, args []string, stdout, stderr io.Writer) error {
	if len(args) == 0 || args[0] != "sign" {
		fmt.Fprintln(stderr, "usage: gateway command sign -key NAME.key < command.json")
		return errUsage
	}
	fs := flags("command sign", stderr)
	keyFile := fs.String("key", "", "private key file (gateway keygen writes one)")
	if err := parse(fs, args[1:]); err != nil {
		return err
	}
	if *keyFile == "" {
		fmt.Fprintln(stderr, "give -key NAME.key")
		return errUsage
	}
	key, err := signing.LoadPrivate(*keyFile)
	if err != nil {
		return err
	}
	data, err := io.ReadAll(io.LimitReader(stdin, downlink.MaxCommandSize+1))
	if err != nil {
		return fmt.Errorf("read the command from stdin: %w", err)
	}
	c, err := downlink.ParseCommand(data)
	if err != nil {
		return fmt.Errorf("stdin: %w", err)
	}
	if c.Signature != "" {
		fmt.Fprintf(stderr, "command %s was signed already: signature replaced\n", c.ID)
	}
	c = downlink.Sign(c, key)
	if _, err := stdout.Write(append(c.JSON(), '\n')); err != nil {
		return err
	}
	fmt.Fprintf(stderr, "signed command %s with key %s\n", c.ID, signing.KeyID(key.Public().(ed25519.PublicKey)))
	return nil
}
