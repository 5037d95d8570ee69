// Package words writes the small phrases that the gateway's messages share,
// so that every command and page says them alike.
package words

import (
	"fmt"
	"strings"
)

// Count is n and what, plural unless n is 1: "1 register", "3 registers",
// "2 buses".
func Count[N ~int | ~int64 | ~uint64](n N, what string) string {
	switch {
	case n == 1:
	case strings.HasSuffix(what, "s"):
		what += "es"
	default:
		what += "s"
	}
	return fmt.Sprintf("%d %s", n, what)
}
