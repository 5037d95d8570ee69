package main

import (
	"context"
	"fmt"
	"io"
	"os"
	"strings"
	"time"

	"go.yaml.in/yaml/v3"

	"fieldlink/fleet"
	"fieldlink/internal/signing"
)

// gatewayList is a repeatable -gateway flag.
type gatewayList []string

func (g *gatewayList) String() string     { return strings.Join(*g, ",") }
func (g *gatewayList) Set(v string) error { *g = append(*g, v); return nil }

// cmdConfig is the fleet's side of remote configuration: it signs a site
// file into a bundle that gateways pull.
func cmdConfig(_ context.Context, args []string, stdout, stderr io.Writer) error {
	if len(args) == 0 || args[0] != "sign" {
		fmt.Fprintln(stderr, "usage: gateway config sign -key NAME.key -serial N [-gateway ID]... [-expires 720h] site.yaml > bundle")
		return errUsage
	}
	f := flags("config sign", stderr)
	key := f.String("key", "", "the fleet's private key file (gateway keygen)")
	serial := f.Uint64("serial", 0, "the bundle's serial: above the one the gateways run, never reused")
	var gateways gatewayList
	f.Var(&gateways, "gateway", "a gateway id the bundle is for (repeat for more); none: every gateway")
	expires := f.Duration("expires", 720*time.Hour, "how long the bundle may be applied")
	notBefore := f.String("not-before", "", "RFC 3339 time before which the bundle is not applied; default now")
	if err := f.Parse(args[1:]); err != nil {
		return errUsage
	}
	if *key == "" || *serial == 0 || f.NArg() != 1 {
		fmt.Fprintln(stderr, "gateway config sign: give -key, a -serial above 0 and one site file")
		return errUsage
	}
	site, err := os.ReadFile(f.Arg(0))
	if err != nil {
		return err
	}
	var tree map[string]any
	if err := yaml.Unmarshal(site, &tree); err != nil || tree == nil {
		return fmt.Errorf("%s is not a site file (YAML): %v", f.Arg(0), err)
	}
	priv, err := signing.LoadPrivate(*key)
	if err != nil {
		return err
	}
	now := time.Now().UTC().Truncate(time.Second)
	m := fleet.Manifest{Serial: *serial, Gateways: gateways, NotBefore: now, Expires: now.Add(*expires)}
	if *notBefore != "" {
		if m.NotBefore, err = time.Parse(time.RFC3339, *notBefore); err != nil {
			return fmt.Errorf("-not-before: %v", err)
		}
		m.Expires = m.NotBefore.Add(*expires)
	}
	b, err := fleet.Sign(site, m, priv)
	if err != nil {
		return err
	}
	_, err = stdout.Write(b)
	return err
}
