package uplink

import (
	"fmt"
	"io"
	"net/http"
	"strconv"
	"strings"
	"time"
)

// httpError is the error of an HTTP exchange with an upstream that did not end
// in a 2xx: either an answer with another status (StatusCode != 0) or no
// usable answer at all (Err != nil: refused, reset, timeout, TLS, …).
type httpError struct {
	Method     string        // POST for a publish, GET for probes, load and registry
	URL        string        // the upstream, without credentials or query
	StatusCode int           // 0 when no answer came
	Status     string        // e.g. "503 Service Unavailable"
	Body       string        // up to 200 bytes of the answer's body, secrets blanked
	RetryAfter time.Duration // the answer's Retry-After, 0 if none (a hint, ≤ 24h)
	Err        error         // why no answer came; nil when StatusCode != 0
}

func (e *httpError) Error() string {
	var b strings.Builder
	b.WriteString("uplink: http ")
	b.WriteString(e.Method)
	b.WriteByte(' ')
	b.WriteString(e.URL)
	b.WriteString(": ")
	if e.StatusCode == 0 {
		if e.Err != nil {
			b.WriteString(e.Err.Error())
		} else {
			b.WriteString("no answer")
		}
		return b.String()
	}
	if e.Status != "" {
		b.WriteString(e.Status)
	} else {
		b.WriteString(strconv.Itoa(e.StatusCode))
	}
	if e.RetryAfter > 0 {
		fmt.Fprintf(&b, " (retry after %v)", e.RetryAfter)
	}
	if e.Body != "" {
		b.WriteString(": ")
		b.WriteString(strconv.Quote(e.Body))
	}
	return b.String()
}

// Unwrap returns the transport error, if any.
func (e *httpError) Unwrap() error { return e.Err }

// httpCheckResponse consumes resp's body so that its connection can be
// reused, and returns nil for a 2xx or an *httpError with an excerpt.
func httpCheckResponse(method, name string, resp *http.Response, secrets []string) *httpError {
	defer resp.Body.Close()
	if resp.StatusCode >= 200 && resp.StatusCode <= 299 {
		_, _ = io.Copy(io.Discard, io.LimitReader(resp.Body, httpDrainLimit))
		return nil
	}
	head := make([]byte, httpExcerptLen)
	n, _ := io.ReadFull(resp.Body, head)
	_, _ = io.Copy(io.Discard, io.LimitReader(resp.Body, httpDrainLimit))
	return &httpError{
		Method:     method,
		URL:        name,
		StatusCode: resp.StatusCode,
		Status:     resp.Status,
		Body:       httpExcerpt(head[:n], secrets),
		RetryAfter: httpParseRetryAfter(resp.Header.Get("Retry-After"), time.Now()),
	}
}

// httpParseRetryAfter reads delta-seconds or an HTTP date; 0 when absent,
// unreadable or past; capped at httpMaxRetryAfter.
func httpParseRetryAfter(v string, now time.Time) time.Duration {
	v = strings.TrimSpace(v)
	if v == "" {
		return 0
	}
	var d time.Duration
	if strings.Trim(v, "0123456789") == "" { // delta-seconds
		secs, err := strconv.ParseUint(v, 10, 64)
		if err != nil || secs > uint64(httpMaxRetryAfter/time.Second) {
			return httpMaxRetryAfter // only a range error is possible
		}
		d = time.Duration(secs) * time.Second
	} else if t, err := http.ParseTime(v); err == nil {
		d = t.Sub(now)
	}
	return max(0, min(d, httpMaxRetryAfter))
}
