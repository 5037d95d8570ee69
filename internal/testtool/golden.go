package testtool

import (
	"bytes"
	"os"
	"path/filepath"
	"testing"
)

// Golden compares got with the golden file at path (testdata/NAME.golden):
// a file that cannot be read stops the test, a difference fails it. With
// update (the test package's -update flag), it writes got to path instead,
// making its directory if need be, and compares nothing.
func Golden(t testing.TB, path string, got []byte, update bool) {
	t.Helper()
	if update {
		if err := os.MkdirAll(filepath.Dir(path), 0o755); err != nil {
			t.Fatal(err)
		}
		if err := os.WriteFile(path, got, 0o644); err != nil {
			t.Fatal(err)
		}
		return
	}
	want, err := os.ReadFile(path)
	if err != nil {
		t.Fatalf("%v (run go test -update to create it)", err)
	}
	if !bytes.Equal(got, want) {
		t.Errorf("%s differs (go test -update rewrites it if the change is intended):\n--- got\n%s\n--- want\n%s", path, got, want)
	}
}
