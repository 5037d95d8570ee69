package commission

import (
	"bufio"
	"context"
	"crypto/rand"
	"crypto/tls"
	"crypto/x509"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net"
	"net/http"
	"net/url"
	"os"
	"strings"
	"syscall"
	"time"

	"fieldlink/config"
	"fieldlink/uplink"
	uplinkhttp "fieldlink/uplink/http"
)

// upstream checks one upstream: its files may be read by the service's
// user, it answers a TCP connect, the TLS handshake verifies it, and it
// takes the gateway's credentials: an MQTT CONNECT, or an HTTP request the
// server authenticates (for InfluxDB, that the database or bucket exists).
func (k *checker) upstream(ctx context.Context, u config.Upstream) Row {
	name, err := uplink.UpstreamName(u.URL)
	if err != nil {
		return Row{"upstream", false, err.Error()}
	}
	what := "upstream " + name
	fail := func(why string) Row { return Row{what, false, why} }
	for _, f := range []struct{ field, path string }{
		{"password_file", u.PasswordFile}, {"token_file", u.TokenFile}, {"headers_file", u.HeadersFile},
		{"tls.ca", tlsField(u.TLS, "ca")}, {"tls.cert", tlsField(u.TLS, "cert")}, {"tls.key", tlsField(u.TLS, "key")},
	} {
		if f.path == "" {
			continue
		}
		if why := k.readable(f.field, f.path); why != "" {
			return fail(why)
		}
	}
	s, err := k.secrets(u)
	if err != nil {
		return fail(err.Error())
	}
	scheme, _ := config.UpstreamScheme(u.URL)
	parsed, err := url.Parse(u.URL)
	if err != nil {
		return fail("its url does not parse")
	}
	addr, err := uplink.ProbeTarget(u.URL)
	if err != nil {
		return fail(err.Error())
	}
	ctx, cancel := context.WithTimeout(ctx, k.opt.Probe)
	defer cancel()
	conn, err := (&net.Dialer{}).DialContext(ctx, "tcp", addr)
	if err != nil {
		return fail(dialWhy(addr, err, k.opt.Probe))
	}
	defer conn.Close()
	if d, ok := ctx.Deadline(); ok {
		_ = conn.SetDeadline(d)
	}
	verified := ""
	if s.tls != nil {
		tc := s.tls.Clone()
		if tc.ServerName == "" {
			tc.ServerName = parsed.Hostname()
		}
		tconn := tls.Client(conn, tc)
		if err := tconn.HandshakeContext(ctx); err != nil {
			return fail(tlsWhy(addr, err))
		}
		conn, verified = tconn, ", TLS verified"
		if tc.InsecureSkipVerify {
			verified = ", TLS not verified (tls.insecure_skip_verify)"
		}
	}
	switch scheme {
	case "mqtt", "mqtts":
		if why := mqttConnect(conn, k.c.Gateway.ID, u.Username, s.password); why != "" {
			return fail(why)
		}
		creds := "connected"
		if u.Username != "" {
			creds = "connected as " + u.Username
		}
		return Row{what, true, creds + verified + ": the broker accepted the CONNECT"}
	}
	conn.Close()
	ok, why := k.httpRequest(ctx, u, s)
	if !ok {
		return fail(why)
	}
	return Row{what, true, "answers" + verified + ": " + why}
}

func tlsField(t *config.TLS, f string) string {
	if t == nil {
		return ""
	}
	return map[string]string{"ca": t.CA, "cert": t.Cert, "key": t.Key}[f]
}

// secrets are an upstream's credentials and TLS, read from its files.
type secrets struct {
	password, token string
	header          http.Header
	tls             *tls.Config
}

func (k *checker) secrets(u config.Upstream) (secrets, error) {
	var s secrets
	var err error
	switch {
	case u.PasswordFile != "":
		if s.password, err = k.c.Secret(u.PasswordFile); err != nil {
			return s, fmt.Errorf("password_file: %w", err)
		}
	case u.PasswordEnv != "":
		s.password = os.Getenv(u.PasswordEnv)
		if s.password == "" {
			return s, fmt.Errorf("password_env %s is empty here: the service's environment (its unit's EnvironmentFile) must set it; export it to check", u.PasswordEnv)
		}
	}
	if u.TokenFile != "" {
		if s.token, err = k.c.Secret(u.TokenFile); err != nil {
			return s, fmt.Errorf("token_file: %w", err)
		}
	}
	if u.HeadersFile != "" {
		b, err := os.ReadFile(k.c.Rel(u.HeadersFile))
		if err == nil {
			s.header, err = uplinkhttp.ParseHeaderFile(b)
		}
		if err != nil {
			return s, fmt.Errorf("headers_file: %w", err)
		}
	}
	if scheme, _ := config.UpstreamScheme(u.URL); scheme == "mqtts" || scheme == "https" {
		t := u.TLS
		if t == nil {
			t = &config.TLS{}
		}
		rel := func(p string) string {
			if p == "" {
				return ""
			}
			return k.c.Rel(p)
		}
		if s.tls, err = uplink.TLSConfig(rel(t.CA), rel(t.Cert), rel(t.Key), t.InsecureSkipVerify); err != nil {
			return s, fmt.Errorf("tls: %w", err)
		}
	}
	return s, nil
}

// dialWhy says why a TCP connect to addr failed.
func dialWhy(addr string, err error, probe time.Duration) string {
	var dns *net.DNSError
	switch {
	case errors.As(err, &dns):
		return fmt.Sprintf("the name %s does not resolve (%v): check the url's host and the gateway's DNS", dns.Name, dns.Err)
	case errors.Is(err, syscall.ECONNREFUSED):
		return fmt.Sprintf("nothing listens on %s: is the server running, is the port right?", addr)
	case errors.Is(err, syscall.ENETUNREACH), errors.Is(err, syscall.EHOSTUNREACH):
		return fmt.Sprintf("no route to %s: check the gateway's network (cable, SIM, VPN)", addr)
	case errors.Is(err, context.DeadlineExceeded), errors.Is(err, os.ErrDeadlineExceeded):
		return fmt.Sprintf("no answer from %s within %v: a firewall, a wrong address, or no network", addr, probe)
	}
	return fmt.Sprintf("%s does not connect: %v", addr, err)
}

// tlsWhy says why a TLS handshake failed.
func tlsWhy(addr string, err error) string {
	var unknown x509.UnknownAuthorityError
	var host x509.HostnameError
	var invalid x509.CertificateInvalidError
	switch {
	case errors.As(err, &unknown):
		return fmt.Sprintf("%s's certificate is not signed by a CA the gateway trusts: give the server's CA in tls.ca", addr)
	case errors.As(err, &host):
		return fmt.Sprintf("%s's certificate is not for this name (%v): use the name the certificate names in the url", addr, err)
	case errors.As(err, &invalid) && invalid.Reason == x509.Expired:
		return fmt.Sprintf("%s's certificate is expired or not yet valid (%v): check the gateway's clock (timedatectl), then the certificate", addr, err)
	case errors.Is(err, context.DeadlineExceeded), errors.Is(err, os.ErrDeadlineExceeded):
		return fmt.Sprintf("%s connects but does not finish the TLS handshake: is it a TLS port (mqtts 8883, https 443)?", addr)
	}
	return fmt.Sprintf("TLS handshake with %s failed: %v", addr, err)
}

// mqttConnect sends an MQTT 3.1.1 CONNECT (as the gateway's uplink does)
// on conn and reads the CONNACK; "" when the broker accepts it. The client
// id is the check's own, so that the running gateway's session is not
// taken over.
func mqttConnect(conn net.Conn, gateway, username, password string) string {
	var rnd [4]byte
	_, _ = rand.Read(rnd[:])
	id := "fieldlink-check-" + gateway + "-" + hex.EncodeToString(rnd[:])
	if len(id) > 64 {
		id = "fieldlink-check-" + hex.EncodeToString(rnd[:])
	}
	str := func(b []byte, s string) []byte { return append(append(b, byte(len(s)>>8), byte(len(s))), s...) }
	flags := byte(0x02) // clean session
	body := str(nil, "MQTT")
	payload := str(nil, id)
	if username != "" {
		flags |= 0x80
		payload = str(payload, username)
		if password != "" {
			flags |= 0x40
			payload = str(payload, password)
		}
	}
	body = append(body, 4, flags, 0, 30) // level 4 (3.1.1), keep alive 30 s
	body = append(body, payload...)
	pkt := []byte{0x10}
	for n := len(body); ; {
		b := byte(n % 128)
		n /= 128
		if n > 0 {
			b |= 0x80
		}
		pkt = append(pkt, b)
		if n == 0 {
			break
		}
	}
	pkt = append(pkt, body...)
	if _, err := conn.Write(pkt); err != nil {
		return "the CONNECT could not be sent: " + err.Error()
	}
	var ack [4]byte
	if _, err := io.ReadFull(conn, ack[:]); err != nil {
		if errors.Is(err, os.ErrDeadlineExceeded) {
			return "connects but sends no CONNACK: is it an MQTT port (mqtt 1883, mqtts 8883)?"
		}
		return "the broker closed the connection without a CONNACK (" + err.Error() + "): is it an MQTT port, does it take TLS (mqtts) or not (mqtt)?"
	}
	if ack[0] != 0x20 || ack[1] != 2 {
		return fmt.Sprintf("answers the CONNECT with % x, not a CONNACK: is it an MQTT port?", ack)
	}
	_, _ = conn.Write([]byte{0xe0, 0}) // DISCONNECT
	switch ack[3] {
	case 0:
		return ""
	case 1:
		return "the broker refuses MQTT 3.1.1, which the gateway speaks"
	case 2:
		return "the broker refuses the client id " + id + " (a client id prefix rule?)"
	case 3:
		return "the broker is up but says its MQTT service is unavailable"
	case 4, 5:
		if username == "" {
			return "the broker wants credentials: give username and password_file"
		}
		return fmt.Sprintf("the broker refuses the credentials of %s: check username and the password in password_file (or password_env)", username)
	}
	return fmt.Sprintf("the broker refuses the CONNECT (code %d)", ack[3])
}

// httpRequest sends the request an HTTP upstream's server authenticates:
// for InfluxDB 1.x SHOW DATABASES, for 2.x the bucket, otherwise an empty
// batch (a JSON array of no packet, or zero lines). ok with what it found,
// or why it failed.
func (k *checker) httpRequest(ctx context.Context, u config.Upstream, s secrets) (ok bool, why string) {
	target, err := url.Parse(u.URL)
	if err != nil {
		return false, "its url does not parse"
	}
	influx := u.Encoding == uplink.EncodingInfluxLine
	q := target.Query()
	path := strings.TrimSuffix(target.Path, "/")
	method, body, ctype := http.MethodPost, "[]", "application/json"
	var check func([]byte) (bool, string)
	switch {
	case influx && strings.HasSuffix(path, "/api/v2/write"):
		bucket := q.Get("bucket")
		b := *target
		b.Path = strings.TrimSuffix(path, "/write") + "/buckets"
		bq := url.Values{"name": {bucket}}
		if q.Get("orgID") != "" {
			bq.Set("orgID", q.Get("orgID"))
		} else {
			bq.Set("org", q.Get("org"))
		}
		b.RawQuery = bq.Encode()
		target, method, body = &b, http.MethodGet, ""
		check = func(resp []byte) (bool, string) {
			var r struct {
				Buckets []struct{ Name string } `json:"buckets"`
			}
			if json.Unmarshal(resp, &r) != nil {
				return false, "InfluxDB's answer to the bucket's lookup does not read: is it InfluxDB 2.x?"
			}
			for _, x := range r.Buckets {
				if x.Name == bucket {
					return true, "credentials accepted, bucket " + bucket + " exists"
				}
			}
			return false, "bucket " + bucket + " does not exist in that organisation: create it (influx bucket create -n " + bucket + ")"
		}
	case influx && strings.HasSuffix(path, "/write"):
		db := q.Get("db")
		b := *target
		b.Path = strings.TrimSuffix(path, "/write") + "/query"
		bq := url.Values{"q": {"SHOW DATABASES"}}
		for _, key := range []string{"u", "p"} {
			if v := q.Get(key); v != "" {
				bq.Set(key, v)
			}
		}
		b.RawQuery = bq.Encode()
		target, method, body = &b, http.MethodGet, ""
		check = func(resp []byte) (bool, string) {
			var r struct {
				Results []struct {
					Series []struct{ Values [][]any } `json:"series"`
					Error  string                     `json:"error"`
				} `json:"results"`
			}
			if json.Unmarshal(resp, &r) != nil || len(r.Results) == 0 {
				return false, "InfluxDB's answer to SHOW DATABASES does not read: is it InfluxDB 1.x?"
			}
			if e := r.Results[0].Error; e != "" {
				return false, "InfluxDB refuses SHOW DATABASES: " + e + ": give the user the right to read database " + db
			}
			for _, s := range r.Results[0].Series {
				for _, v := range s.Values {
					if len(v) > 0 && v[0] == db {
						return true, "credentials accepted, database " + db + " exists"
					}
				}
			}
			return false, fmt.Sprintf("database %s does not exist: create it (influx -execute 'CREATE DATABASE \"%s\"')", db, db)
		}
	case influx:
		body, ctype = "", "text/plain; charset=utf-8"
	}
	req, err := http.NewRequestWithContext(ctx, method, target.String(), strings.NewReader(body))
	if err != nil {
		return false, err.Error()
	}
	for h, v := range s.header {
		req.Header[h] = v
	}
	if body != "" || method == http.MethodPost {
		req.Header.Set("Content-Type", ctype)
	}
	switch {
	case s.token != "" && influx:
		req.Header.Set("Authorization", "Token "+s.token)
	case s.token != "":
		req.Header.Set("Authorization", "Bearer "+s.token)
	case u.Username != "":
		req.SetBasicAuth(u.Username, s.password)
	}
	client := &http.Client{
		Transport:     &http.Transport{TLSClientConfig: s.tls, Proxy: http.ProxyFromEnvironment},
		CheckRedirect: func(*http.Request, []*http.Request) error { return http.ErrUseLastResponse },
	}
	defer client.CloseIdleConnections()
	resp, err := client.Do(req)
	if err != nil {
		return false, "connects, but the request failed: " + err.Error()
	}
	defer resp.Body.Close()
	data, _ := io.ReadAll(io.LimitReader(bufio.NewReader(resp.Body), 1<<20))
	server := "the server"
	if influx {
		server = "InfluxDB"
	}
	switch code := resp.StatusCode; {
	case code == http.StatusUnauthorized || code == http.StatusForbidden:
		if u.Username == "" && s.token == "" && len(s.header) == 0 {
			return false, fmt.Sprintf("%s wants credentials (%s): give token_file, username and password_file, or headers_file", server, resp.Status)
		}
		return false, fmt.Sprintf("%s refuses the credentials (%s): check token_file, username and password, or headers_file", server, resp.Status)
	case code == http.StatusNotFound && influx && strings.Contains(string(data), "database not found"):
		return false, fmt.Sprintf("InfluxDB has no database %s: create it (influx -execute 'CREATE DATABASE \"%s\"')", q.Get("db"), q.Get("db"))
	case code == http.StatusNotFound:
		return false, fmt.Sprintf("%s has no %s (404 Not Found): check the url's path", server, target.Path)
	case code >= 500:
		return false, fmt.Sprintf("%s fails (%s): see its log", server, resp.Status)
	case code >= 300 && code < 400:
		return false, fmt.Sprintf("%s redirects (%s) to %s: put that address in the url", server, resp.Status, resp.Header.Get("Location"))
	case check != nil && code/100 == 2:
		return check(data)
	case code/100 == 2:
		return true, fmt.Sprintf("credentials accepted (%s to an empty batch)", resp.Status)
	}
	// 400, 405, 409, 422 …: the request passed authentication, and the
	// server refused an empty batch, as it may.
	return true, fmt.Sprintf("credentials accepted (it answered an empty batch with %s)", resp.Status)
}
