//go:build !race

package chaos

// raceBuild: the test runs without the race detector; so does the gateway.
const raceBuild = false
