package http

import (
	"fieldlink/uplink/site"
	"fmt"
	"net/http"
	"os"
	"slices"

	"fieldlink/uplink"
)

// CheckSite checks the site file's settings HTTP owns on the upstream u,
// mine when u is an HTTP upstream: its encoding, and InfluxDB's URL with
// influx_line (also of an upstream of no kind, whose URL is refused
// already), and token_file and headers_file, which only HTTP upstreams
// take. The header file is read, to check it, but no message repeats a
// value.
func (Kind) CheckSite(u *site.Upstream, mine bool, f site.File) {
	enc := uplink.Encoding(u.Encoding)
	if mine || !u.Known {
		if enc != "" && !slices.Contains(uplink.Encodings, enc) {
			f.Errorf("encoding", "unknown encoding %q for an HTTP upstream (valid: json, influx_line)", enc)
		} else if enc == uplink.EncodingInfluxLine {
			if err := CheckInfluxURL(u.URL); err != nil {
				f.Errorf("url", "%v", err)
			}
		}
	}
	if u.TokenFile != "" {
		if !mine && u.Known {
			f.Errorf("token_file", "applies only to http:// and https:// upstreams")
		}
		if u.Username != "" {
			f.Errorf("token_file", "give username (basic auth) or token_file, not both")
		}
		if err := f.Readable(f.Path(u.TokenFile)); err != nil {
			f.Errorf("token_file", "%v (give a file the gateway can read, whose first line is the token)", err)
		}
	}
	if u.HeadersFile != "" {
		if !mine && u.Known {
			f.Errorf("headers_file", "applies only to http:// and https:// upstreams")
		}
		b, err := os.ReadFile(f.Path(u.HeadersFile))
		if err == nil {
			var h http.Header
			if h, err = ParseHeaderFile(b); err == nil && h.Get("Authorization") != "" && (u.Username != "" || u.TokenFile != "") {
				err = fmt.Errorf("the file sets Authorization, and so does username or token_file")
			}
			if err != nil {
				err = fmt.Errorf("%s: %w", f.Path(u.HeadersFile), err)
			}
		}
		if err != nil {
			f.Errorf("headers_file", "%v (give a file the gateway can read, one \"Name: value\" a line)", err)
		}
	}
}
