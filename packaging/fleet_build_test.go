//go:build fleet

package packaging_test

import (
	"bytes"
	"crypto/ecdsa"
	"crypto/elliptic"
	"crypto/rand"
	"crypto/x509"
	"encoding/json"
	"encoding/pem"
	"os"
	"os/exec"
	"path/filepath"
	"runtime"
	"strings"
	"testing"
)

// debArch is the Debian architecture of this host, whose packages the
// container runs.
func debArch() string {
	if runtime.GOARCH == "arm" {
		return "armhf"
	}
	return runtime.GOARCH
}

// fleetRootfs returns the cached Debian rootfs, building it if needed.
func fleetRootfs(t *testing.T) string {
	t.Helper()
	cmd := exec.Command("../scripts/fleet-rootfs")
	var stderr bytes.Buffer
	cmd.Stderr = &stderr
	out, err := cmd.Output()
	if err != nil {
		t.Fatalf("scripts/fleet-rootfs: %v\n%s", err, stderr.Bytes())
	}
	return strings.TrimSpace(string(out))
}

// buildFleetDebs builds the packages of versions 1.0.0 to 5.0.0 and the
// Mender artifacts of the last four. 3.0.0 is a version that cannot poll:
// built with the anemometer's profile reading register 0x100, which the
// devices do not have. 5.0.0 says it writes a buffer record format that no
// version reads (a future format change shipped too early).
func buildFleetDebs(t *testing.T) []string {
	t.Helper()
	dist := t.TempDir()
	bin := t.TempDir()
	run := func(env []string, name string, args ...string) {
		t.Helper()
		cmd := exec.Command(name, args...)
		cmd.Dir = ".."
		cmd.Env = append(os.Environ(), env...)
		if out, err := cmd.CombinedOutput(); err != nil {
			t.Fatalf("%s %s: %v\n%s", name, strings.Join(args, " "), err, out)
		}
	}
	run([]string{"GOBIN=" + bin, "GOFLAGS="}, "go", "install", "github.com/goreleaser/nfpm/v2/cmd/nfpm@v2.41.1")

	profile, err := os.ReadFile("../firmware-profiles/generic-wind-speed.yaml")
	if err != nil {
		t.Fatal(err)
	}
	broken := bytes.Replace(profile, []byte("address: 0x0000"), []byte("address: 0x0100"), 1)
	if bytes.Equal(broken, profile) {
		t.Fatal("generic-wind-speed.yaml has no \"address: 0x0000\" to break for the version that cannot poll")
	}
	overlay := filepath.Join(bin, "overlay.json")
	abs, _ := filepath.Abs("../firmware-profiles/generic-wind-speed.yaml")
	writeFile(t, filepath.Join(bin, "broken.yaml"), string(broken))
	o, _ := json.Marshal(map[string]map[string]string{"Replace": {abs: filepath.Join(bin, "broken.yaml")}})
	writeFile(t, overlay, string(o))

	// 5.0.0 writes (says it writes) record format 2, which no version reads.
	formats, err := os.ReadFile("../buffer/formats.go")
	if err != nil {
		t.Fatal(err)
	}
	newer := bytes.Replace(formats, []byte("func WriteFormats() Formats { return ReadFormats() }"),
		[]byte("func WriteFormats() Formats { f := ReadFormats(); f.Record = append(f.Record, 2); return f }"), 1)
	if bytes.Equal(newer, formats) {
		t.Fatal("buffer/formats.go has no WriteFormats to change for the version whose buffer the others cannot read")
	}
	overlay5 := filepath.Join(bin, "overlay5.json")
	abs5, _ := filepath.Abs("../buffer/formats.go")
	writeFile(t, filepath.Join(bin, "formats.go"), string(newer))
	o5, _ := json.Marshal(map[string]map[string]string{"Replace": {abs5: filepath.Join(bin, "formats.go")}})
	writeFile(t, overlay5, string(o5))

	// Artifacts are signed; the devices take only those (ArtifactVerifyKey).
	key, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	if err != nil {
		t.Fatal(err)
	}
	der, _ := x509.MarshalECPrivateKey(key)
	signKey := filepath.Join(bin, "artifact.key")
	writeFile(t, signKey, string(pem.EncodeToMemory(&pem.Block{Type: "EC PRIVATE KEY", Bytes: der})))
	pub, _ := x509.MarshalPKIXPublicKey(&key.PublicKey)
	verifyKey := filepath.Join(dist, "artifact-verify-key.pem")
	writeFile(t, verifyKey, string(pem.EncodeToMemory(&pem.Block{Type: "PUBLIC KEY", Bytes: pub})))
	out := []string{verifyKey}

	for _, v := range []string{"1.0.0", "2.0.0", "3.0.0", "4.0.0", "5.0.0"} {
		args := []string{"build", "-trimpath", "-tags", "field,nethttpomithttp2", "-ldflags", "-s -w -X main.version=" + v,
			"-o", filepath.Join(dist, "fieldlink-gateway_"+v+"_linux_"+debTarget()), "./cmd/gateway"}
		switch v {
		case "3.0.0":
			args = append(args[:1], append([]string{"-overlay", overlay}, args[1:]...)...)
		case "5.0.0":
			args = append(args[:1], append([]string{"-overlay", overlay5}, args[1:]...)...)
		}
		run([]string{"CGO_ENABLED=0"}, "go", args...)
		run([]string{"VERSION=" + v, "DIST=" + dist, "ARCHES=" + debArch(), "NFPM=" + filepath.Join(bin, "nfpm")}, "packaging/build-debs")
		deb := filepath.Join(dist, "fieldlink_"+v+"_"+debArch()+".deb")
		out = append(out, deb)
		if v != "1.0.0" {
			art := filepath.Join(dist, "fieldlink-"+v+"-"+debArch()+".mender")
			run(nil, "packaging/mender/make-artifact", "-t", "fleet-check", "-k", signKey, "-o", art, deb)
			out = append(out, art)
		}
		if v == "2.0.0" {
			art := filepath.Join(dist, "fieldlink-"+v+"-"+debArch()+"-unsigned.mender")
			run(nil, "packaging/mender/make-artifact", "-t", "fleet-check", "-o", art, deb)
			out = append(out, art)
		}
	}
	return out
}

// debTarget is the cross-build target name of debArch's binary.
func debTarget() string {
	if runtime.GOARCH == "arm" {
		return "armv6"
	}
	return runtime.GOARCH
}

func writeFile(t *testing.T, name, content string) {
	t.Helper()
	write(t, name, []byte(content), 0o644)
}

func copyFile(t *testing.T, from, to string) {
	t.Helper()
	write(t, to, readFile(t, from), 0o644)
}
