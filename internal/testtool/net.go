package testtool

import (
	"io"
	"net"
	"net/http"
	"strconv"
	"testing"
)

// FreeAddr returns a loopback host:port that nothing listened on a moment
// ago: for a server the test starts in another process (a daemon, the
// gateway), which must be told its address before it listens. A server
// in the test's own process listens on 127.0.0.1:0 instead.
func FreeAddr(t testing.TB) string {
	t.Helper()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer ln.Close()
	return ln.Addr().String()
}

// FreePort is FreeAddr's port.
func FreePort(t testing.TB) int {
	t.Helper()
	_, port, _ := net.SplitHostPort(FreeAddr(t))
	n, err := strconv.Atoi(port)
	if err != nil {
		t.Fatal(err)
	}
	return n
}

// HTTPGet fetches url and returns the status code and body; a failed
// request or read fails the test.
func HTTPGet(t testing.TB, url string) (int, string) {
	t.Helper()
	code, body, err := Get(url)
	if err != nil {
		t.Fatal(err)
	}
	return code, body
}

// Get fetches url and returns the status code and body, or the error of
// a server not (yet) there: for a test that polls until it answers.
func Get(url string) (int, string, error) {
	resp, err := http.Get(url)
	if err != nil {
		return 0, "", err
	}
	defer resp.Body.Close()
	b, err := io.ReadAll(resp.Body)
	return resp.StatusCode, string(b), err
}
