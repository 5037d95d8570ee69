package lineproto

import (
	"errors"
	"fmt"
	"strings"
)

// ErrChecksum is the error wrapped when an NMEA checksum is missing,
// malformed or wrong.
var ErrChecksum = errors.New("lineproto: bad NMEA checksum")

const hexUpper = "0123456789ABCDEF"

// Checksum returns the NMEA 0183 checksum of s: the XOR of all its bytes.
// Pass the text between the leading '$' (or '!') and the '*'.
func Checksum(s string) byte {
	var c byte
	for i := 0; i < len(s); i++ {
		c ^= s[i]
	}
	return c
}

// AppendChecksum returns sentence with "*hh" appended, hh being the
// checksum in upper-case hex of the text after the leading '$' or '!' (of
// the whole text when it has neither).
func AppendChecksum(sentence string) string {
	body := sentence
	if body != "" && (body[0] == '$' || body[0] == '!') {
		body = body[1:]
	}
	c := Checksum(body)
	return sentence + "*" + string([]byte{hexUpper[c>>4], hexUpper[c&0xf]})
}

// VerifyChecksum checks the "*hh" checksum at the end of an NMEA sentence
// and returns the sentence without it. The sentence starts at the first '$'
// or '!' (bytes before it, such as line noise, are dropped); upper- and
// lower-case hex are accepted. Errors wrap [ErrChecksum] and quote the
// line.
func VerifyChecksum(line string) (string, error) {
	start := strings.IndexAny(line, "$!")
	if start < 0 {
		return "", fmt.Errorf("%w: no '$' or '!' starts a sentence in %q", ErrChecksum, clip(line))
	}
	s := line[start:]
	star := strings.LastIndexByte(s, '*')
	if star < 0 {
		return "", fmt.Errorf("%w: no *hh checksum in %q", ErrChecksum, clip(line))
	}
	hh := s[star+1:]
	want, ok := parseHex2(hh)
	if !ok {
		return "", fmt.Errorf("%w: checksum %q is not two hex digits in %q", ErrChecksum, hh, clip(line))
	}
	if got := Checksum(s[1:star]); got != want {
		return "", fmt.Errorf("%w: sentence says %02X, computed %02X, in %q", ErrChecksum, want, got, clip(line))
	}
	return s[:star], nil
}

func parseHex2(s string) (byte, bool) {
	if len(s) != 2 {
		return 0, false
	}
	hi, ok1 := unhex(s[0])
	lo, ok2 := unhex(s[1])
	return hi<<4 | lo, ok1 && ok2
}

func unhex(c byte) (byte, bool) {
	switch {
	case '0' <= c && c <= '9':
		return c - '0', true
	case 'a' <= c && c <= 'f':
		return c - 'a' + 10, true
	case 'A' <= c && c <= 'F':
		return c - 'A' + 10, true
	}
	return 0, false
}

// clip shortens text quoted in an error message.
func clip(s string) string {
	const n = 80
	if len(s) <= n {
		return s
	}
	return s[:n] + "..."
}
