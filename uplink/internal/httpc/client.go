package httpc

import (
	"context"
	"crypto/tls"
	"encoding/base64"
	"fmt"
	"io"
	"net"
	"net/http"
	"net/url"
	"strings"
	"time"
)

// ParseURL parses an http(s) URL; its errors, without a prefix, never
// show the URL's userinfo or query.
func ParseURL(raw string) (*url.URL, error) {
	u, err := url.Parse(raw)
	if err != nil {
		return nil, fmt.Errorf("bad URL: %w", UnwrapURLError(err))
	}
	u.Scheme = strings.ToLower(u.Scheme)
	if u.Scheme != "http" && u.Scheme != "https" {
		return nil, fmt.Errorf("%s: scheme must be http or https", RedactURL(u))
	}
	if u.Hostname() == "" {
		return nil, fmt.Errorf("%s: no host", RedactURL(u))
	}
	return u, nil
}

// BasicAuthFromURL returns a copy of header (nil: a new one) with basic
// auth from u's userinfo, unless header already has an Authorization, and
// removes the userinfo from u.
func BasicAuthFromURL(u *url.URL, header http.Header) http.Header {
	header = header.Clone()
	if header == nil {
		header = make(http.Header)
	}
	if u.User != nil {
		if header.Get("Authorization") == "" {
			pass, _ := u.User.Password()
			token := base64.StdEncoding.EncodeToString([]byte(u.User.Username() + ":" + pass))
			header.Set("Authorization", "Basic "+token)
		}
		u.User = nil
	}
	return header
}

// NewTransport returns a transport with a small keep-alive pool for one
// upstream: a gateway talks to each upstream over a few connections at most.
func NewTransport(tlsCfg *tls.Config) *http.Transport {
	dialer := &net.Dialer{Timeout: 30 * time.Second, KeepAlive: 30 * time.Second}
	return &http.Transport{
		Proxy:                 http.ProxyFromEnvironment,
		DialContext:           dialer.DialContext,
		TLSClientConfig:       tlsCfg.Clone(),
		TLSHandshakeTimeout:   10 * time.Second,
		ForceAttemptHTTP2:     true,
		MaxIdleConns:          4,
		MaxIdleConnsPerHost:   4,
		MaxConnsPerHost:       8,
		IdleConnTimeout:       90 * time.Second,
		ExpectContinueTimeout: time.Second,
	}
}

// NewClient returns a client that does not follow redirects: a POST
// redirected elsewhere is a configuration error to see, not to follow (and
// credentials must not travel to another host).
func NewClient(t *http.Transport) *http.Client {
	return &http.Client{
		Transport: t,
		CheckRedirect: func(*http.Request, []*http.Request) error {
			return http.ErrUseLastResponse
		},
	}
}

// Get does a GET of rawURL (already checked) with header, and returns
// the answer and its body, at most limit bytes (more is an error). Non-2xx
// answers are *Error, except the statuses listed in pass, which are
// returned with their (empty) body.
func Get(ctx context.Context, client *http.Client, rawURL, name string, header http.Header, limit int64, pass ...int) (*http.Response, []byte, error) {
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, rawURL, nil)
	if err != nil {
		return nil, nil, Failed(http.MethodGet, name, "", UnwrapURLError(err))
	}
	for k, v := range header {
		req.Header[k] = v
	}
	if req.Header.Get("Accept") == "" {
		req.Header.Set("Accept", "application/json")
	}
	resp, err := client.Do(req)
	if err != nil {
		return nil, nil, Failed(http.MethodGet, name, "", UnwrapURLError(err))
	}
	for _, code := range pass {
		if resp.StatusCode == code {
			_, _ = io.Copy(io.Discard, io.LimitReader(resp.Body, DrainLimit))
			resp.Body.Close()
			return resp, nil, nil
		}
	}
	if resp.StatusCode < 200 || resp.StatusCode > 299 {
		return resp, nil, CheckResponse(http.MethodGet, name, "", resp, nil)
	}
	defer resp.Body.Close()
	body, err := io.ReadAll(io.LimitReader(resp.Body, limit+1))
	if err != nil {
		return resp, nil, Failed(http.MethodGet, name, "", fmt.Errorf("reading the answer: %w", err))
	}
	if int64(len(body)) > limit {
		return resp, nil, fmt.Errorf("uplink: http GET %s: answer longer than %d bytes", name, limit)
	}
	return resp, body, nil
}
