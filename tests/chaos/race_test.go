//go:build race

package chaos

// raceBuild: the test runs under the race detector, so the gateway binary
// is built with -race too.
const raceBuild = true
