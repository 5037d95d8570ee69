package httpc

import (
	"errors"
	"net/url"
	"strings"
)

// RedactURL renders u as scheme://host/path: without userinfo, and with
// "?..." in place of a query (tokens often travel there) and no fragment.
func RedactURL(u *url.URL) string {
	r := url.URL{Scheme: u.Scheme, Host: u.Host, Path: u.Path, RawPath: u.RawPath, Opaque: u.Opaque}
	s := r.String()
	if u.RawQuery != "" || u.ForceQuery {
		s += "?..."
	}
	return s
}

// UnwrapURLError drops the *url.Error wrapper, whose message repeats the
// URL with its query.
func UnwrapURLError(err error) error {
	var ue *url.Error
	if errors.As(err, &ue) && ue.Err != nil {
		return ue.Err
	}
	return err
}

// Excerpt makes a bounded, valid UTF-8, secret-free string of a body.
func Excerpt(b []byte, secrets []string) string {
	s := strings.TrimSpace(strings.ToValidUTF8(string(b), "\uFFFD"))
	for _, secret := range secrets {
		if secret != "" {
			s = strings.ReplaceAll(s, secret, "xxxxx")
		}
	}
	return s
}
