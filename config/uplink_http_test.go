package config

import (
	"os"
	"path/filepath"
	"strings"
	"testing"

	"fieldlink/uplink"
)

func TestHTTPUpstreamEncodingTokenAndHeaders(t *testing.T) {
	dir := t.TempDir()
	write := func(name, text string) string {
		p := filepath.Join(dir, name)
		if err := os.WriteFile(p, []byte(text), 0o600); err != nil {
			t.Fatal(err)
		}
		return p
	}
	token := write("token", "tok-s3cret\n")
	headers := write("headers", "# the ingest gateway's key\nX-Api-Key: key-s3cret\n\nX-Tenant: farm-7\n")
	auth := write("auth", "Authorization: Bearer auth-s3cret\n")
	twice := write("twice", "X-A: a-s3cret\nx-a: b-s3cret\n")
	own := write("own", "Content-Type: text/html\n")
	bad := write("bad", "X-A a-s3cret\n")

	c, err := Parse(filepath.Join(dir, "site.yaml"), []byte(good+`uplink:
  upstreams:
    - {url: "http://127.0.0.1:8086/write?db=farm", encoding: influx_line, token_file: token, headers_file: headers}
`), testProfiles)
	if err != nil {
		t.Fatal(err)
	}
	if up := c.Uplink.Upstreams[0]; up.Encoding != uplink.EncodingInfluxLine || c.Rel(up.TokenFile) != token || c.Rel(up.HeadersFile) != headers {
		t.Errorf("upstream %+v", up)
	}

	// ms, the default, and s, which older site files give, are valid.
	for _, prec := range []string{"ms", "s"} {
		if _, err := Parse("site.yaml", []byte(good+"uplink: {upstreams: [{url: 'http://h:8086/write?db=farm&precision="+prec+"', encoding: influx_line}]}\n"), testProfiles); err != nil {
			t.Errorf("precision=%s: %v", prec, err)
		}
	}
	for _, tc := range []struct{ add, want string }{
		{"{url: 'http://h:8086/write', encoding: influx_line}", `uplink.upstreams[0].url: InfluxDB 1.x's /write needs db in the query (such as /write?db=farm)`},
		{"{url: 'http://h:8086/api/v2/write?org=o&bucket=b&precision=ns', encoding: influx_line}", `uplink.upstreams[0].url: precision=ns: the packets' time is to the millisecond`},
		{"{url: 'http://h:8086/write?db=a', encoding: influx_line}, {url: 'http://h:8086/write?db=b', encoding: influx_line}", `uplink.upstreams[1].url: is uplink.upstreams[0] again: the gateway knows an upstream by its URL without credentials or query, http://h:8086/write?...`},
		{"{url: 'https://h', encoding: csv}", `uplink.upstreams[0].encoding: unknown encoding "csv" for an HTTP upstream (valid: json, influx_line)`},
		{"{url: 'mqtt://h', encoding: influx_line}", `uplink.upstreams[0].encoding: influx_line applies only to http:// and https:// upstreams`},
		{"{url: 'mqtt://h', token_file: " + token + "}", `uplink.upstreams[0].token_file: applies only to http://`},
		{"{url: 'mqtt://h', headers_file: " + headers + "}", `uplink.upstreams[0].headers_file: applies only to http://`},
		{"{url: 'https://h', token_file: /nonexistent/tok}", `uplink.upstreams[0].token_file: open /nonexistent/tok: no such file or directory (give a file the gateway can read, whose first line is the token)`},
		{"{url: 'https://h', username: u, token_file: " + token + "}", `uplink.upstreams[0].token_file: give username (basic auth) or token_file, not both`},
		{"{url: 'https://h', token_file: " + token + ", headers_file: " + auth + "}", `uplink.upstreams[0].headers_file: ` + auth + `: the file sets Authorization, and so does username or token_file`},
		{"{url: 'https://h', headers_file: " + twice + "}", `headers_file: ` + twice + `: line 2: X-A given twice`},
		{"{url: 'https://h', headers_file: " + own + "}", `headers_file: ` + own + `: line 1: Content-Type is the gateway's to set`},
		{"{url: 'https://h', headers_file: " + bad + "}", `headers_file: ` + bad + `: line 1: not a header (write Name: value)`},
	} {
		_, err := Parse("site.yaml", []byte(good+"uplink: {upstreams: ["+tc.add+"]}\n"), testProfiles)
		if err == nil || !strings.Contains(err.Error(), tc.want) || !strings.Contains(err.Error(), "site.yaml:16:") {
			t.Errorf("%s:\n got  %v\n want site.yaml:16:…%s", tc.add, err, tc.want)
		}
		if err != nil && strings.Contains(err.Error(), "s3cret") {
			t.Errorf("%s: the error shows a secret: %v", tc.add, err)
		}
	}
}
