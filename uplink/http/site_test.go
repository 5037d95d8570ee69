package http

import (
	"errors"
	"fieldlink/uplink/site"
	"fmt"
	"os"
	"path/filepath"
	"slices"
	"testing"

	"fieldlink/uplink"
)

// siteFile records a kind's reports as "field: message" and resolves
// paths against dir.
type siteFile struct {
	dir  string
	errs []string
}

func (f *siteFile) Errorf(field, format string, args ...any) {
	f.errs = append(f.errs, field+": "+fmt.Sprintf(format, args...))
}
func (f *siteFile) Path(p string) string { return filepath.Join(f.dir, p) }
func (f *siteFile) Readable(path string) error {
	if _, err := os.Stat(path); err != nil {
		return errors.New("cannot read " + filepath.Base(path))
	}
	return nil
}

func TestCheckSite(t *testing.T) {
	dir := t.TempDir()
	for name, text := range map[string]string{"tok": "t-s3cret\n", "hdr": "X-A: a-s3cret\n", "auth": "Authorization: Bearer s3cret\n", "bad": "X-A s3cret\n"} {
		if err := os.WriteFile(filepath.Join(dir, name), []byte(text), 0o600); err != nil {
			t.Fatal(err)
		}
	}
	for _, tc := range []struct {
		name string
		u    site.Upstream
		mine bool
		want []string
	}{
		{"good", site.Upstream{URL: "https://h:8086/write?db=f", Known: true, Encoding: string(uplink.EncodingInfluxLine), TokenFile: "tok", HeadersFile: "hdr"}, true, nil},
		{"unknown encoding", site.Upstream{URL: "https://h", Known: true, Encoding: "csv"}, true,
			[]string{`encoding: unknown encoding "csv" for an HTTP upstream (valid: json, influx_line)`}},
		{"a refused URL's encoding", site.Upstream{URL: "ftp://h/write", Encoding: string(uplink.EncodingInfluxLine)}, false,
			[]string{"url: InfluxDB 1.x's /write needs db in the query (such as /write?db=farm)"}},
		{"another kind's encoding", site.Upstream{URL: "mqtt://h", Known: true, Encoding: "csv"}, false, nil},
		{"files on another kind", site.Upstream{URL: "mqtt://h", Known: true, TokenFile: "nope", HeadersFile: "hdr"}, false,
			[]string{"token_file: applies only to http:// and https:// upstreams",
				"token_file: cannot read nope (give a file the gateway can read, whose first line is the token)",
				"headers_file: applies only to http:// and https:// upstreams"}},
		{"two authorizations", site.Upstream{URL: "https://h", Known: true, Username: "u", TokenFile: "tok", HeadersFile: "auth"}, true,
			[]string{"token_file: give username (basic auth) or token_file, not both",
				"headers_file: " + filepath.Join(dir, "auth") + ": the file sets Authorization, and so does username or token_file (give a file the gateway can read, one \"Name: value\" a line)"}},
		{"not headers", site.Upstream{URL: "https://h", Known: true, HeadersFile: "bad"}, true,
			[]string{"headers_file: " + filepath.Join(dir, "bad") + ": line 1: not a header (write Name: value) (give a file the gateway can read, one \"Name: value\" a line)"}},
	} {
		f := &siteFile{dir: dir}
		u := tc.u
		Kind{}.CheckSite(&u, tc.mine, f)
		if !slices.Equal(f.errs, tc.want) {
			t.Errorf("%s: got %q\nwant %q", tc.name, f.errs, tc.want)
		}
	}
}
