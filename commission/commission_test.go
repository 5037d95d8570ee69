package commission

import (
	"context"
	"fmt"
	"net"
	"net/http"
	"net/url"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"golang.org/x/sys/unix"

	"fieldlink/config"
	firmwareprofiles "fieldlink/firmware-profiles"
	"fieldlink/internal/testtool"
	"fieldlink/internal/testtool/emutest"
	"fieldlink/sensors/emulator"
	"fieldlink/sensors/profile"
)

// aBus is a bus for a site file that needs one and whose test is about
// something else.
const aBus = "buses: [{name: b, url: \"tcp://127.0.0.1:1\", devices: [{name: d, profile: generic-mine-methane, slave: 1}]}]\n"

// load loads a site file written for the test.
func load(t *testing.T, src string) *config.Config {
	t.Helper()
	return loadIn(t, t.TempDir(), src)
}

// loadIn loads a site file written in dir.
func loadIn(t *testing.T, dir, src string) *config.Config {
	t.Helper()
	file := filepath.Join(dir, "site.yaml")
	if err := os.WriteFile(file, []byte(src), 0o600); err != nil {
		t.Fatal(err)
	}
	c, err := config.Load(file, func(dir string) (profile.Set, error) { return profile.Load(firmwareprofiles.FS, dir) })
	if err != nil {
		t.Fatal(err)
	}
	return c
}

// row is the row whose What starts with prefix.
func row(t *testing.T, rows []Row, prefix string) Row {
	t.Helper()
	for _, r := range rows {
		if strings.HasPrefix(r.What, prefix) {
			return r
		}
	}
	t.Fatalf("no row %q in %+v", prefix, rows)
	return Row{}
}

// want checks a row: ok, and its why saying each of says.
func want(t *testing.T, r Row, ok bool, says ...string) {
	t.Helper()
	for _, s := range says {
		if !strings.Contains(r.Why, s) {
			t.Errorf("%s: %v %q; want it to say %q", r.What, r.OK, r.Why, s)
		}
	}
	if r.OK != ok {
		t.Errorf("%s: ok %v, want %v (%s)", r.What, r.OK, ok, r.Why)
	}
}

// other is a checker for a user other than the one running the test.
func other(t *testing.T, c *config.Config) *checker {
	t.Helper()
	if os.Geteuid() != 0 {
		k := &checker{c: c, opt: Options{}.defaults()}
		k.who, _ = whoRuns(k.opt)
		return k
	}
	k := &checker{c: c, opt: Options{ServiceUser: "nobody"}.defaults()}
	var rows []Row
	k.who, rows = whoRuns(k.opt)
	if k.who.name != "nobody" || k.who.self {
		t.Fatalf("checked as %+v (%v), want nobody", k.who, rows)
	}
	return k
}

func me(c *config.Config) *checker {
	k := &checker{c: c, opt: Options{ServiceUser: "root"}.defaults()}
	k.who, _ = whoRuns(k.opt)
	return k
}

// A serial port (a pty of socat's, as a USB adapter's) is missing, not a
// serial device, closed to the service's user, held by another program
// (made exclusive, or locked), or ok.
func TestPort(t *testing.T) {
	_, b := testtool.PtyPair(t)
	c := load(t, "site: {id: \"001\"}\ngateway: {id: gw}\n"+aBus)
	k := me(c)
	want(t, k.port("port", b), true, b+" is there, ", "it is free")

	missing := filepath.Join(t.TempDir(), "ttyUSB7")
	want(t, k.port("port", missing), false, missing+" missing: is the adapter plugged in?")
	want(t, k.port("port", c.File), false, "is not a serial device (it is a regular file)")
	if os.Geteuid() == 0 {
		want(t, other(t, c).port("port", b), false, "nobody may not open "+b, "owner root")
	}

	// Made exclusive (TIOCEXCL), as the gateway's own serial library does:
	// refused to anyone but root, whom the port itself tells.
	fd, err := unix.Open(b, unix.O_RDWR|unix.O_NOCTTY|unix.O_NONBLOCK|unix.O_CLOEXEC, 0)
	if err != nil {
		t.Fatal(err)
	}
	defer unix.Close(fd)
	if err := unix.IoctlSetInt(fd, unix.TIOCEXCL, 0); err != nil {
		t.Fatal(err)
	}
	want(t, k.port("port", b), false, b+" busy: another program holds it", "fuser -v "+b)
	k.daemon = true
	want(t, k.port("port", b), false, b+" busy: the running gateway holds it")
	k.daemon = false

	// Locked (flock), as other serial programs do.
	if err := unix.IoctlSetInt(fd, unix.TIOCNXCL, 0); err != nil {
		t.Fatal(err)
	}
	want(t, k.port("port", b), true, "it is free")
	if err := unix.Flock(fd, unix.LOCK_EX|unix.LOCK_NB); err != nil {
		t.Fatal(err)
	}
	want(t, k.port("port", b), false, b+" busy: another program holds it")
}

// The buffer's directory exists and the service's user may create files
// in it, and read and write the buffer file.
func TestBufferDir(t *testing.T) {
	dir := t.TempDir()
	site := func(path string) *config.Config {
		return load(t, fmt.Sprintf("site: {id: \"001\"}\ngateway: {id: gw}\nbuffer: {path: %s}\nuplink: {upstreams: [{url: \"mqtt://127.0.0.1:1\"}]}\n", path)+aBus)
	}
	missing := filepath.Join(dir, "var", "lib", "fieldlink")
	want(t, me(site(filepath.Join(missing, "buf.db"))).bufferDir(), false, missing+" missing: create it for the service (install -d")
	want(t, me(site(filepath.Join(dir, "buf.db"))).bufferDir(), true, dir+" is there and ")
	if os.Geteuid() != 0 {
		return
	}
	if err := os.Chmod(dir, 0o700); err != nil {
		t.Fatal(err)
	}
	want(t, other(t, site(filepath.Join(dir, "buf.db"))).bufferDir(), false, "nobody may not create files in "+dir+" (owner root", "chown nobody "+dir)
	open := filepath.Join(dir, "open")
	if err := os.Mkdir(open, 0o777); err != nil {
		t.Fatal(err)
	}
	if err := os.Chmod(open, 0o777); err != nil {
		t.Fatal(err)
	}
	buf := filepath.Join(open, "buf.db")
	if err := os.WriteFile(buf, nil, 0o600); err != nil {
		t.Fatal(err)
	}
	want(t, other(t, site(buf)).bufferDir(), false, "nobody may not read and write the buffer "+buf)
	if err := os.Chown(buf, 65534, 65534); err != nil {
		t.Fatal(err)
	}
	want(t, other(t, site(buf)).bufferDir(), true, "nobody may write in it")
}

// Each slave answers one read of its profile's first block: the project's
// emulator over TCP and on a serial line (a socat pty pair); one that is
// not there, a bus whose server cannot be reached.
func TestSlaves(t *testing.T) {
	_, tcp := emutest.Serve(t, false, "generic-mine-methane", "generic-mine-oxygen")
	emu, err := emulator.New(emutest.Devices(t, "generic-mine-methane"), emulator.Options{Seed: 1})
	if err != nil {
		t.Fatal(err)
	}
	b := emutest.ServePty(t, emu, 9600, 'N')
	refused := testtool.RefusedAddr(t)
	c := load(t, fmt.Sprintf(`site: {id: "001"}
gateway: {id: gw}
buses:
  - name: tcp
    url: tcp://%s
    timeout: 300ms
    devices:
      - {name: ch4-1, profile: generic-mine-methane, slave: 1}
      - {name: o2-1, profile: generic-mine-oxygen, slave: 2}
      - {name: ghost, profile: generic-mine-oxygen, slave: 7}
  - name: rtu
    url: rtu://%s?baud=9600
    devices:
      - {name: ch4-rtu, profile: generic-mine-methane, slave: 1}
  - name: gone
    url: tcp://%s
    devices:
      - {name: far-1, profile: generic-mine-methane, slave: 1}
      - {name: far-2, profile: generic-mine-methane, slave: 2}
`, tcp, b, refused))
	rows := Check(context.Background(), c, Options{ServiceUser: "root"})
	want(t, row(t, rows, "device ch4-1 "), true, "answered the read of holding 0+1 (the first block of profile generic-mine-methane)")
	want(t, row(t, rows, "device o2-1 "), true, "answered the read of")
	want(t, row(t, rows, "device ghost "), false, "slave 7 does not answer the read of", "check the wiring")
	want(t, row(t, rows, "bus rtu: port"), true, b+" is there")
	want(t, row(t, rows, "device ch4-rtu "), true, "answered the read of holding 0+1")
	want(t, row(t, rows, "device far-1 "), false, refused+" cannot be reached")
	want(t, row(t, rows, "device far-2 "), false, "not read: the bus's "+refused+" cannot be reached (above)")
	if n := Failed(rows); n != 3 {
		t.Errorf("%d rows failed, want 3: %+v", n, rows)
	}
}

// Each upstream answers and takes the gateway's credentials: a real
// mosquitto with a password file, a real InfluxDB 1.x, an HTTP server that
// wants basic auth; one that refuses the connect, one that connects and
// says nothing.
func TestUpstreams(t *testing.T) {
	passwd := testtool.RequireSbin(t, "mosquitto_passwd", "mosquitto")
	dir := t.TempDir()
	pwfile := filepath.Join(dir, "passwd")
	if out, err := exec.Command(passwd, "-b", "-c", pwfile, "gw1", "s3cret").CombinedOutput(); err != nil {
		t.Fatalf("mosquitto_passwd: %v\n%s", err, out)
	}
	broker := testtool.StartMosquitto(t, testtool.FindMosquitto(t), "allow_anonymous false", "password_file "+pwfile)
	for name, pw := range map[string]string{"right.pass": "s3cret\n", "wrong.pass": "guess\n"} {
		if err := os.WriteFile(filepath.Join(dir, name), []byte(pw), 0o600); err != nil {
			t.Fatal(err)
		}
	}
	influx := testtool.StartInfluxd(t)
	influx.Query("", `CREATE DATABASE "farm"`)
	ingest := testtool.ServeLoopback(t, func(ctx context.Context, ln net.Listener) error {
		srv := &http.Server{Handler: http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
			if u, p, ok := r.BasicAuth(); !ok || u != "gw1" || p != "s3cret" {
				http.Error(w, "who are you?", http.StatusUnauthorized)
				return
			}
			w.WriteHeader(http.StatusNoContent)
		})}
		go func() { <-ctx.Done(); srv.Close() }()
		srv.Serve(ln)
		return nil
	})
	silent := testtool.ServeLoopback(t, func(ctx context.Context, ln net.Listener) error {
		go func() { <-ctx.Done(); ln.Close() }()
		var conns []net.Conn
		defer func() {
			for _, c := range conns {
				c.Close()
			}
		}()
		for {
			c, err := ln.Accept()
			if err != nil {
				return nil
			}
			conns = append(conns, c) // read nothing, answer nothing
		}
	})
	refused := testtool.RefusedAddr(t)
	up := func(u string) Row {
		t.Helper()
		c := loadIn(t, dir, fmt.Sprintf("site: {id: \"001\"}\ngateway: {id: gw}\nbuffer: {path: buf.db}\nuplink: {upstreams: [%s]}\n", u)+aBus)
		return row(t, Check(context.Background(), c, Options{ServiceUser: "root", Probe: 500 * time.Millisecond}), "upstream ")
	}
	want(t, up(fmt.Sprintf(`{url: "mqtt://%s", username: gw1, password_file: right.pass}`, broker)), true, "connected as gw1: the broker accepted the CONNECT")
	want(t, up(fmt.Sprintf(`{url: "mqtt://%s", username: gw1, password_file: wrong.pass}`, broker)), false, "the broker refuses the credentials of gw1: check username and the password in password_file")
	want(t, up(fmt.Sprintf(`{url: "mqtt://%s"}`, broker)), false, "the broker wants credentials: give username and password_file")
	want(t, up(fmt.Sprintf(`{url: "mqtt://%s"}`, refused)), false, "nothing listens on "+refused)
	want(t, up(fmt.Sprintf(`{url: "mqtt://%s"}`, silent)), false, "connects but sends no CONNACK")
	want(t, up(fmt.Sprintf(`{url: "%s", encoding: influx_line}`, influx.URL("/write", url.Values{"db": {"farm"}}))), true, "credentials accepted, database farm exists")
	want(t, up(fmt.Sprintf(`{url: "%s", encoding: influx_line}`, influx.URL("/write", url.Values{"db": {"mine"}}))), false, "database mine does not exist: create it")
	want(t, up(fmt.Sprintf(`{url: "http://%s/ingest", username: gw1, password_file: right.pass}`, ingest)), true, "credentials accepted")
	want(t, up(fmt.Sprintf(`{url: "http://%s/ingest", username: gw1, password_file: wrong.pass}`, ingest)), false, "the server refuses the credentials (401 Unauthorized)")
}
