package testtool

import (
	"fmt"
	"net/http"
	"net/http/httptest"
	"slices"
	"strings"
	"testing"
	"time"
)

// The release build's flags are those of the Makefile's field target and
// packaging's build; a cross build names its target.
func TestBuildArgsAndEnv(t *testing.T) {
	b := Build{Tags: []string{"field", "nethttpomithttp2"}, GOARCH: "arm", GOARM: "7", Static: true, Release: true}
	got := strings.Join(b.Args("/tmp/gw"), " ")
	want := "build -trimpath -buildvcs=false -ldflags -s -w -tags field,nethttpomithttp2 -o /tmp/gw fieldlink/cmd/gateway"
	if got != want {
		t.Errorf("args\n got %s\nwant %s", got, want)
	}
	env := b.Env()
	for _, v := range []string{"CGO_ENABLED=0", "GOOS=linux", "GOARCH=arm", "GOARM=7"} {
		if !slices.Contains(env, v) {
			t.Errorf("env lacks %s", v)
		}
	}
	if got := strings.Join(Build{Race: true, Package: "fieldlink/x"}.Args("o"), " "); got != "build -race -o o fieldlink/x" {
		t.Errorf("race args: %s", got)
	}
}

func TestHTTPGet(t *testing.T) {
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		w.WriteHeader(http.StatusTeapot)
		fmt.Fprint(w, r.URL.Path)
	}))
	defer srv.Close()
	code, body := HTTPGet(t, srv.URL+"/x")
	if code != http.StatusTeapot || body != "/x" {
		t.Errorf("HTTPGet = %d %q", code, body)
	}
}

func TestGetNothingListening(t *testing.T) {
	if code, _, err := Get("http://" + RefusedAddr(t) + "/"); err == nil || code != 0 {
		t.Errorf("Get on a closed port = %d, %v; want an error", code, err)
	}
}

func TestEventually(t *testing.T) {
	n := 0
	if !Eventually(time.Minute, time.Millisecond, func() bool { n++; return n == 3 }) || n != 3 {
		t.Errorf("Eventually: true after 3 calls, got %d calls", n)
	}
	n = 0
	if Eventually(0, time.Millisecond, func() bool { n++; return false }) || n < 2 {
		t.Errorf("Eventually past its deadline: false after a last try, got %d calls", n)
	}
}
