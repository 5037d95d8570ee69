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

// cmdCommand is "gateway command sign -key NAME.key -site ID -gateway ID":
// a downlink command's JSON on stdin, the same command signed on stdout,
// one line. The signature covers the site and gateway the command names,
// so that no other gateway runs it: -site and -gateway set them, and a
// command that names neither is not signed.
func cmdCommand(_ context.Context, args []string, stdout, stderr io.Writer) error {
	if len(args) == 0 || args[0] != "sign" {
		fmt.Fprintln(stderr, "usage: gateway command sign -key NAME.key -site ID -gateway ID < command.json")
		return errUsage
	}
	fs := flags("command sign", stderr)
	keyFile := fs.String("key", "", "private key file (gateway keygen writes one)")
	site := fs.String("site", "", "the site.id of the gateway the command is for (default: the command's \"site\")")
	gateway := fs.String("gateway", "", "the gateway.id the command is for; no other gateway runs it (default: the command's \"gateway\")")
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
	for _, f := range []struct {
		flag, field string
		set         *string
		in          *string
	}{{"site", "site", site, &c.Site}, {"gateway", "gateway", gateway, &c.Gateway}} {
		switch {
		case *f.set != "" && *f.in != "" && *f.set != *f.in:
			return fmt.Errorf("command %s names %s %s, not %s: give the command for %s %s", c.ID, f.field, *f.in, *f.set, f.field, *f.set)
		case *f.set != "":
			*f.in = *f.set
		case *f.in == "":
			fmt.Fprintf(stderr, "give -%s ID: a signed command names the site and gateway it is for, and runs on no other\n", f.flag)
			return errUsage
		}
	}
	if c.Signature != "" {
		fmt.Fprintf(stderr, "command %s was signed already: signature replaced\n", c.ID)
	}
	c = downlink.Sign(c, key)
	if _, err := stdout.Write(append(c.JSON(), '\n')); err != nil {
		return err
	}
	fmt.Fprintf(stderr, "signed command %s for gateway %s at site %s with key %s\n", c.ID, c.Gateway, c.Site, signing.KeyID(key.Public().(ed25519.PublicKey)))
	return nil
}
