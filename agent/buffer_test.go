package agent

import (
	"errors"
	"io"
	"log/slog"
	"os"
	"os/user"
	"path/filepath"
	"strings"
	"syscall"
	"testing"

	"fieldlink/config"
)

// bufferSite is a site whose buffer file is path.
func bufferSite(t *testing.T, path string) *config.Config {
	t.Helper()
	c := site(t, "127.0.0.1:1", "")
	c.Buffer.Path = path
	return c
}

func owner(t *testing.T, path string) (uid, gid uint32) {
	t.Helper()
	fi, err := os.Stat(path)
	if err != nil {
		t.Fatal(err)
	}
	st := fi.Sys().(*syscall.Stat_t)
	return st.Uid, st.Gid
}

// Run as root (a command under sudo before the service's first start), a
// buffer file and the directories made for it take the owner of the
// nearest existing directory that is not root's, so that the service,
// running as its own user, can open them; files that were there keep
// theirs.
func TestBufferCreatedAsRootTakesTheServiceOwner(t *testing.T) {
	if os.Geteuid() != 0 {
		t.Skip("gives files to a made-up user: needs root")
	}
	const uid, gid = 4242, 4343
	dir := t.TempDir()
	if err := os.Chown(dir, uid, gid); err != nil {
		t.Fatal(err)
	}
	root := filepath.Join(dir, "mine")
	if err := os.WriteFile(root, nil, 0o600); err != nil {
		t.Fatal(err)
	}
	path := filepath.Join(dir, "var", "fieldlink", "buffer.db")
	q, err := OpenBuffer(bufferSite(t, path), slog.New(slog.DiscardHandler))
	if err != nil {
		t.Fatal(err)
	}
	if err := q.Close(); err != nil {
		t.Fatal(err)
	}
	for _, p := range []string{filepath.Join(dir, "var"), filepath.Dir(path), path} {
		if u, g := owner(t, p); u != uid || g != gid {
			t.Errorf("%s: owned by %d:%d, want %d:%d", p, u, g, uid, gid)
		}
	}
	entries, _ := os.ReadDir(filepath.Dir(path))
	for _, e := range entries {
		if u, _ := owner(t, filepath.Join(filepath.Dir(path), e.Name())); u != uid {
			t.Errorf("%s: owned by %d, want %d", e.Name(), u, uid)
		}
	}
	if u, _ := owner(t, root); u != 0 {
		t.Errorf("a file that was there changed owner to %d", u)
	}
}

// When the nearest existing directory is root's, the service's user
// (fieldlink, made by the package) gets the files; without one, they stay
// root's, as the service then runs as root.
func TestServiceOwner(t *testing.T) {
	dir := t.TempDir()
	if err := os.Chown(dir, 0, 0); err != nil && os.Geteuid() == 0 {
		t.Fatal(err)
	}
	lookup := func(name string) (*user.User, error) {
		if name != ServiceUser {
			return nil, errors.New("asked for " + name)
		}
		return &user.User{Uid: "4242", Gid: "4343"}, nil
	}
	none := func(name string) (*user.User, error) { return nil, user.UnknownUserError(name) }
	mine := filepath.Join(dir, "mine")
	if err := os.Mkdir(mine, 0o755); err != nil {
		t.Fatal(err)
	}
	if err := os.Chown(mine, 4000, 4001); err != nil {
		t.Skip("gives files to a made-up user: needs root")
	}
	for _, tc := range []struct {
		name     string
		path     string
		lookup   func(string) (*user.User, error)
		uid, gid int
		ok       bool
	}{
		{"a user's directory", filepath.Join(mine, "a", "b", "buffer.db"), lookup, 4000, 4001, true},
		{"root's directory, the service's user", filepath.Join(dir, "a", "buffer.db"), lookup, 4242, 4343, true},
		{"root's directory, no service user", filepath.Join(dir, "a", "buffer.db"), none, 0, 0, false},
	} {
		uid, gid, ok, err := serviceOwner(tc.path, tc.lookup)
		if err != nil || uid != tc.uid || gid != tc.gid || ok != tc.ok {
			t.Errorf("%s: %d:%d %v %v, want %d:%d %v", tc.name, uid, gid, ok, err, tc.uid, tc.gid, tc.ok)
		}
	}
}

// A command that reads the buffer of a stopped gateway (buffer stats,
// audit) never creates it: no file, no directory, and an error that says
// so.
func TestOpenStoppedBufferCreatesNothing(t *testing.T) {
	dir := t.TempDir()
	path := filepath.Join(dir, "var", "fieldlink", "buffer.db")
	q, done, err := OpenStoppedBuffer(bufferSite(t, path), io.Discard)
	if err == nil {
		done()
		t.Fatal("a missing buffer file was opened")
	}
	_ = q
	if !errors.Is(err, os.ErrNotExist) || !strings.Contains(err.Error(), path) || !strings.Contains(err.Error(), "nothing was created") {
		t.Errorf("error %q: want one naming %s and saying nothing was created", err, path)
	}
	if _, err := os.Stat(filepath.Join(dir, "var")); !errors.Is(err, os.ErrNotExist) {
		t.Errorf("%s/var: %v; want nothing created", dir, err)
	}
}
