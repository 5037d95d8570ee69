// Package httpc is the HTTP client that the uplink's core (probes, load
// polls, the registry) and its HTTP kind share: URLs parsed and redacted,
// transports and clients, and the error of an exchange with its words.
package httpc

import "time"

// Bounds of an exchange.
const (
	// ExcerptLen is how much of a response body an [Error] quotes.
	ExcerptLen = 200
	// DrainLimit is how much of a response body is read and discarded so
	// that its connection can be reused; a longer body closes the
	// connection instead.
	DrainLimit = 64 << 10
	// MaxRetryAfter caps the Retry-After hint.
	MaxRetryAfter = 24 * time.Hour
)
