package testtool

import (
	"io"
	"net/http"
	"testing"
)

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
