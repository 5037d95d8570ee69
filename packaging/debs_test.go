package packaging_test

import (
	"archive/tar"
	"bytes"
	"debug/buildinfo"
	"debug/elf"
	"io"
	"io/fs"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"

	"fieldlink/config"
	"fieldlink/internal/testtool"
)

const version = "1.2.3-test"

// arch is one package build-debs makes: its Debian architecture, the
// cross-build target whose binary it holds, and what that binary must be.
type arch struct {
	deb, target   string
	goarch, goarm string // GOARM: the armhf package must run on an ARMv6 Pi
	machine       elf.Machine
}

var arches = []arch{
	{"armhf", "armv6", "arm", "6", elf.EM_ARM},
	{"arm64", "arm64", "arm64", "", elf.EM_AARCH64},
	{"amd64", "amd64", "amd64", "", elf.EM_X86_64},
}

// buildDebs builds the gateway for every architecture the way
// scripts/cross-build/build names it (quicker: no second build), runs
// packaging/build-debs on them, and returns the directory with the debs.
func buildDebs(t *testing.T) string {
	t.Helper()
	if testing.Short() {
		t.Skip("builds three gateway binaries and three packages")
	}
	testtool.Require(t, "dpkg-deb", "dpkg")
	dist := t.TempDir()
	for _, a := range arches {
		testtool.Build{Tags: []string{"field", "nethttpomithttp2"}, GOARCH: a.goarch, GOARM: a.goarm, Static: true, Release: true,
			Out: filepath.Join(dist, "fieldlink-gateway_"+version+"_linux_"+a.target)}.Run(t)
	}
	cmd := exec.Command("./build-debs")
	cmd.Env = append(os.Environ(), "VERSION="+version, "DIST="+dist)
	out, err := cmd.CombinedOutput()
	if err != nil {
		t.Fatalf("build-debs: %v\n%s", err, out)
	}
	t.Logf("build-debs:\n%s", out)
	return dist
}

func TestDebs(t *testing.T) {
	dist := buildDebs(t)
	site, err := config.Starter("farm", config.StarterVars{})
	if err != nil {
		t.Fatal(err)
	}
	unit := readFile(t, "fieldlink.service")
	for _, a := range arches {
		t.Run(a.deb, func(t *testing.T) {
			deb := filepath.Join(dist, "fieldlink_"+version+"_"+a.deb+".deb")

			info := dpkgDeb(t, "-I", deb)
			for _, want := range []string{"Package: fieldlink\n", "Version: " + version + "\n", "Architecture: " + a.deb + "\n"} {
				if !strings.Contains(info, want) {
					t.Errorf("dpkg-deb -I: no %q in\n%s", strings.TrimSpace(want), info)
				}
			}

			listing := dpkgDeb(t, "-c", deb)
			for _, want := range []string{
				"-rwxr-xr-x root/root .* ./usr/bin/fieldlink-gateway",
				"-rw-r--r-- root/root .* ./etc/fieldlink/site.yaml",
				"-rw-r--r-- root/root .* ./lib/systemd/system/fieldlink.service",
				"drwxr-x--- root/root .* ./var/lib/fieldlink/",
				"-rwxr-xr-x root/root .* ./usr/share/mender/modules/v3/fieldlink-deb",
			} {
				before, path, _ := strings.Cut(want, " .* ")
				if !hasLine(listing, before, path) {
					t.Errorf("dpkg-deb -c: no %s with %s in\n%s", path, before, listing)
				}
			}

			ctrl := untar(t, dpkgDebRaw(t, "--ctrl-tarfile", deb))
			if got := strings.Fields(string(ctrl["conffiles"].data)); len(got) != 1 || got[0] != "/etc/fieldlink/site.yaml" {
				t.Errorf("conffiles = %q, want just /etc/fieldlink/site.yaml", got)
			}
			for _, s := range []string{"postinst", "prerm", "postrm"} {
				f, ok := ctrl[s]
				if !ok {
					t.Errorf("no %s maintainer script", s)
					continue
				}
				if f.mode&0o111 == 0 {
					t.Errorf("%s is not executable (mode %o)", s, f.mode)
				}
				if out, err := exec.Command("sh", "-n", filepath.Join("scripts", s)).CombinedOutput(); err != nil {
					t.Errorf("sh -n %s: %v\n%s", s, err, out)
				}
			}
			for _, s := range []string{"mender/fieldlink-deb", "mender/ArtifactCommit_Enter_50_fieldlink-health"} {
				if out, err := exec.Command("sh", "-n", s).CombinedOutput(); err != nil {
					t.Errorf("sh -n %s: %v\n%s", s, err, out)
				}
			}
			if !bytes.Contains(ctrl["control"].data, []byte("Depends: tzdata")) {
				t.Errorf("the package does not depend on tzdata, whose zones the field binary reads:\n%s", ctrl["control"].data)
			}
			if !bytes.Contains(ctrl["postinst"].data, []byte("dialout")) {
				t.Error("postinst does not add the fieldlink user to dialout")
			}

			files := untar(t, dpkgDebRaw(t, "--fsys-tarfile", deb))
			if got := files["usr/share/mender/modules/v3/fieldlink-deb"].data; !bytes.Equal(got, readFile(t, "mender/fieldlink-deb")) {
				t.Error("the packaged Mender update module differs from packaging/mender/fieldlink-deb")
			}
			if got := files["etc/fieldlink/site.yaml"].data; !bytes.Equal(got, site) {
				t.Error("/etc/fieldlink/site.yaml differs from the farm starter: gateway init -o packaging/site.yaml -force")
			}
			if got := files["lib/systemd/system/fieldlink.service"].data; !bytes.Equal(got, unit) {
				t.Error("the packaged unit differs from packaging/fieldlink.service")
			}
			checkBinary(t, a, files["usr/bin/fieldlink-gateway"].data)
		})
	}
}

// checkBinary checks that bin is a static gateway for a.
func checkBinary(t *testing.T, a arch, bin []byte) {
	t.Helper()
	f, err := elf.NewFile(bytes.NewReader(bin))
	if err != nil {
		t.Fatalf("/usr/bin/fieldlink-gateway: %v", err)
	}
	defer f.Close()
	if f.Machine != a.machine {
		t.Errorf("/usr/bin/fieldlink-gateway is for %v, want %v", f.Machine, a.machine)
	}
	for _, p := range f.Progs {
		if p.Type == elf.PT_INTERP {
			t.Error("/usr/bin/fieldlink-gateway is dynamically linked")
		}
	}
	bi, err := buildinfo.Read(bytes.NewReader(bin))
	if err != nil {
		t.Fatalf("/usr/bin/fieldlink-gateway build info: %v", err)
	}
	settings := map[string]string{}
	for _, s := range bi.Settings {
		settings[s.Key] = s.Value
	}
	if bi.Path != "fieldlink/cmd/gateway" || settings["GOARCH"] != a.goarch || settings["GOARM"] != a.goarm {
		t.Errorf("/usr/bin/fieldlink-gateway is %s GOARCH=%s GOARM=%s, want fieldlink/cmd/gateway GOARCH=%s GOARM=%s",
			bi.Path, settings["GOARCH"], settings["GOARM"], a.goarch, a.goarm)
	}
}

// TestUnitVerifies runs the unit through systemd-analyze verify, in a root
// holding the gateway binary at its ExecStart path and the host's system
// units (verify follows the unit's dependencies, sysinit.target and the
// like). verify exits 0 even for the settings it ignores, so any output is
// a failure; a deliberately broken copy checks that this catches mistakes.
func TestUnitVerifies(t *testing.T) {
	analyze := testtool.Require(t, "systemd-analyze", "systemd")
	unit := readFile(t, "fieldlink.service")
	if out := verify(t, analyze, unit); out != "" {
		t.Errorf("systemd-analyze verify fieldlink.service:\n%s", out)
	}
	broken := bytes.Replace(unit, []byte("DeviceAllow=char-ttyUSB rw\n"), []byte("DeviceAllow=char-ttyUSB rwz\n"), 1)
	if out := verify(t, analyze, broken); !strings.Contains(out, "rwz") {
		t.Errorf("systemd-analyze verify let an invalid DeviceAllow= through (output %q)", out)
	}
}

func verify(t *testing.T, analyze string, unit []byte) string {
	t.Helper()
	root := t.TempDir()
	hostUnits := "/lib/systemd/system"
	if _, err := os.Stat(filepath.Join(hostUnits, "sysinit.target")); err != nil {
		hostUnits = "/usr/lib/systemd/system"
	}
	units := filepath.Join(root, "lib/systemd/system")
	if err := os.CopyFS(units, os.DirFS(hostUnits)); err != nil {
		t.Fatalf("copy %s: %v", hostUnits, err)
	}
	write(t, filepath.Join(units, "fieldlink.service"), unit, 0o644)
	// Any executable will do: verify checks that ExecStart= and
	// ExecReload= exist.
	write(t, filepath.Join(root, "usr/bin/fieldlink-gateway"), []byte("#!/bin/sh\n"), 0o755)
	write(t, filepath.Join(root, "bin/sh"), []byte("#!/bin/sh\n"), 0o755) // ExecReload=
	out, err := exec.Command(analyze, "verify", "--man=no", "--root="+root, "fieldlink.service").CombinedOutput()
	if err != nil {
		return string(out) + err.Error()
	}
	return string(out)
}

type file struct {
	mode fs.FileMode
	data []byte
}

// untar reads a tar archive into a map from clean path ("etc/x") to file.
func untar(t *testing.T, b []byte) map[string]file {
	t.Helper()
	m := map[string]file{}
	r := tar.NewReader(bytes.NewReader(b))
	for {
		h, err := r.Next()
		if err == io.EOF {
			return m
		}
		if err != nil {
			t.Fatalf("tar: %v", err)
		}
		data, err := io.ReadAll(r)
		if err != nil {
			t.Fatalf("tar %s: %v", h.Name, err)
		}
		m[strings.TrimPrefix(filepath.Clean(h.Name), "./")] = file{h.FileInfo().Mode(), data}
	}
}

func hasLine(listing, prefix, path string) bool {
	for _, l := range strings.Split(listing, "\n") {
		if strings.HasPrefix(l, prefix) && strings.HasSuffix(l, " "+path) {
			return true
		}
	}
	return false
}

func dpkgDeb(t *testing.T, args ...string) string { return string(dpkgDebRaw(t, args...)) }

func dpkgDebRaw(t *testing.T, args ...string) []byte {
	t.Helper()
	cmd := exec.Command("dpkg-deb", args...)
	var stderr bytes.Buffer
	cmd.Stderr = &stderr
	out, err := cmd.Output()
	if err != nil {
		t.Fatalf("dpkg-deb %s: %v\n%s", strings.Join(args, " "), err, stderr.Bytes())
	}
	return out
}

func readFile(t *testing.T, name string) []byte {
	t.Helper()
	b, err := os.ReadFile(name)
	if err != nil {
		t.Fatal(err)
	}
	return b
}

func write(t *testing.T, name string, b []byte, mode fs.FileMode) {
	t.Helper()
	if err := os.MkdirAll(filepath.Dir(name), 0o755); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(name, b, mode); err != nil {
		t.Fatal(err)
	}
}

// TestUnitHardening checks that the unit keeps every setting the gateway's
// safety rests on; systemd-analyze verify accepts a unit without them.
func TestUnitHardening(t *testing.T) {
	unit := string(readFile(t, "fieldlink.service"))
	for _, want := range []string{
		"Type=notify", "WatchdogSec=", "Restart=always", "ExecReload=/bin/sh -c 'kill -HUP $$MAINPID'",
		"User=fieldlink", "SupplementaryGroups=dialout",
		"NoNewPrivileges=yes", "ProtectSystem=strict", "ProtectHome=yes", "PrivateTmp=yes",
		"ReadWritePaths=/var/lib/fieldlink", "DevicePolicy=closed", "DeviceAllow=char-ttyUSB rw",
		"RuntimeDirectory=fieldlink", "RuntimeDirectoryPreserve=yes",
		"CapabilityBoundingSet=", "SystemCallFilter=@system-service", "RestrictAddressFamilies=AF_UNIX AF_INET AF_INET6",
		"MemoryDenyWriteExecute=yes", "RestrictNamespaces=yes", "ProtectProc=invisible", "Environment=FIELDLINK_LOG_FORMAT=journal",
	} {
		found := false
		for _, line := range strings.Split(unit, "\n") {
			if strings.HasPrefix(strings.TrimSpace(line), want) {
				found = true
			}
		}
		if !found {
			t.Errorf("fieldlink.service has no %q line", want)
		}
	}
}
