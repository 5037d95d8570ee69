package sensors_test

import (
	"bufio"
	"encoding/hex"
	"fmt"
	"regexp"
	"strconv"
	"strings"
	"time"
)

// chunk is one transfer socat -x recorded on a pty pair.
type chunk struct {
	fromA bool // ">" in socat's log: written on the a side
	at    time.Time
	data  []byte
}

var socatHeader = regexp.MustCompile(`^([<>]) (\d{4}/\d\d/\d\d \d\d:\d\d:\d\d)\.(\d+)\s+length=(\d+)`)

// parseSocatLog reads the transfers of a socat -x log. socat 1.7/1.8 print
// the fraction of a second as nine digits that hold microseconds
// ("00:26:41.000780677" is 0.780677 s); six-digit fractions are read as
// microseconds too, and anything else as nanoseconds.
func parseSocatLog(log string) ([]chunk, error) {
	var out []chunk
	var cur *chunk
	sc := bufio.NewScanner(strings.NewReader(log))
	for sc.Scan() {
		line := sc.Text()
		if m := socatHeader.FindStringSubmatch(line); m != nil {
			at, err := time.ParseInLocation("2006/01/02 15:04:05", m[2], time.Local)
			if err != nil {
				return nil, err
			}
			n, err := strconv.Atoi(m[3])
			if err != nil {
				return nil, err
			}
			frac := time.Duration(n)
			if (len(m[3]) == 9 && n < 1e6) || len(m[3]) == 6 {
				frac *= time.Microsecond
			}
			out = append(out, chunk{fromA: m[1] == ">", at: at.Add(frac)})
			cur = &out[len(out)-1]
			continue
		}
		if cur == nil || !strings.HasPrefix(line, " ") {
			continue
		}
		b, err := hex.DecodeString(strings.ReplaceAll(strings.TrimSpace(line), " ", ""))
		if err != nil {
			return nil, fmt.Errorf("socat log line %q: %w", line, err)
		}
		cur.data = append(cur.data, b...)
	}
	return out, sc.Err()
}

// rtuRequestLen is the length of an RTU request frame that starts b; 0 if
// b is too short to tell.
func rtuRequestLen(b []byte) int {
	if len(b) < 2 {
		return 0
	}
	switch b[1] {
	case 1, 2, 3, 4, 5, 6:
		return 8
	case 15, 16:
		if len(b) < 7 {
			return 0
		}
		return 9 + int(b[6])
	}
	return 0
}

// rtuReplyLen is the length of an RTU reply frame that starts b.
func rtuReplyLen(b []byte) int {
	if len(b) < 3 {
		return 0
	}
	switch fc := b[1]; {
	case fc&0x80 != 0:
		return 5
	case fc >= 1 && fc <= 4:
		return 5 + int(b[2])
	case fc == 5 || fc == 6 || fc == 15 || fc == 16:
		return 8
	}
	return 0
}

func crcOK(frame []byte) bool {
	if len(frame) < 4 {
		return false
	}
	crc := uint16(0xFFFF)
	for _, c := range frame[:len(frame)-2] {
		crc ^= uint16(c)
		for range 8 {
			if crc&1 != 0 {
				crc = crc>>1 ^ 0xA001
			} else {
				crc >>= 1
			}
		}
	}
	return frame[len(frame)-2] == byte(crc) && frame[len(frame)-1] == byte(crc>>8)
}
