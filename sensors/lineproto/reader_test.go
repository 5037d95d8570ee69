package lineproto_test

import (
	"bytes"
	"errors"
	"io"
	"strings"
	"testing"
	"testing/iotest"

	"fieldlink/sensors/lineproto"
)

// readAll reads lines until EOF, collecting lines and counting
// ErrLineTooLong errors. Any other error fails the test.
func readAll(t testing.TB, r *lineproto.Reader, limit int) (lines []string, tooLong int) {
	t.Helper()
	for range limit {
		line, err := r.ReadLine()
		switch {
		case err == nil:
			lines = append(lines, line)
		case errors.Is(err, lineproto.ErrLineTooLong):
			tooLong++
		case errors.Is(err, io.EOF):
			return lines, tooLong
		default:
			t.Fatalf("ReadLine: %v", err)
		}
	}
	t.Fatalf("no EOF after %d calls", limit)
	return nil, 0
}

func TestReaderLines(t *testing.T) {
	in := "$WIMWV,120,R,002.10,M,A*0E\r\n\r\n\nplain\nlast without newline\r"
	want := []string{"$WIMWV,120,R,002.10,M,A*0E", "", "", "plain", "last without newline"}
	for name, src := range map[string]io.Reader{
		"whole":    strings.NewReader(in),
		"one byte": iotest.OneByteReader(strings.NewReader(in)),
		"half":     iotest.HalfReader(strings.NewReader(in)),
		"data+EOF": iotest.DataErrReader(strings.NewReader(in)),
	} {
		t.Run(name, func(t *testing.T) {
			lines, tooLong := readAll(t, lineproto.NewReader(src, 0), 100)
			if tooLong != 0 || strings.Join(lines, "|") != strings.Join(want, "|") {
				t.Errorf("lines %q (%d too long), want %q", lines, tooLong, want)
			}
		})
	}
}

func TestReaderHugeLine(t *testing.T) {
	const max = 64
	huge := strings.Repeat("A", 1<<20) // a megabyte without a newline
	in := "before\n" + huge + "\r\nafter\n"
	r := lineproto.NewReader(strings.NewReader(in), max)

	if line, err := r.ReadLine(); err != nil || line != "before" {
		t.Fatalf("first line %q, %v", line, err)
	}
	line, err := r.ReadLine()
	if !errors.Is(err, lineproto.ErrLineTooLong) || line != "" {
		t.Fatalf("huge line: %q, %v; want ErrLineTooLong", line, err)
	}
	if !strings.Contains(err.Error(), `"AAAA`) || !strings.Contains(err.Error(), "64 bytes") {
		t.Errorf("error %q should quote the line's start and give the limit", err)
	}
	// The rest of the huge line is skipped, with an error every buffer's
	// worth so that the caller keeps control, then reading goes on.
	lines, tooLong := readAll(t, r, 1<<20)
	if len(lines) != 1 || lines[0] != "after" {
		t.Errorf("after the huge line: %q", lines)
	}
	if tooLong < (1<<20)/(max+2)-2 {
		t.Errorf("only %d further errors while skipping a megabyte", tooLong)
	}
}

// endless is a sensor that never sends a newline.
type endless struct{ n int }

func (e *endless) Read(p []byte) (int, error) {
	for i := range p {
		p[i] = 'x'
	}
	e.n += len(p)
	return len(p), nil
}

func TestReaderNeverEndingLine(t *testing.T) {
	src := &endless{}
	r := lineproto.NewReader(src, 512)
	for i := range 100 {
		if _, err := r.ReadLine(); !errors.Is(err, lineproto.ErrLineTooLong) {
			t.Fatalf("call %d: %v, want ErrLineTooLong", i, err)
		}
	}
	// Each call returned after reading about one buffer, not the stream.
	if src.n > 101*(512+2) {
		t.Errorf("read %d bytes in 100 calls", src.n)
	}
}

func TestReaderLineOfExactlyMax(t *testing.T) {
	const max = 16
	ok := strings.Repeat("a", max)
	in := ok + "\r\n" + ok + "b\n" + ok + "\n"
	lines, tooLong := readAll(t, lineproto.NewReader(strings.NewReader(in), max), 10)
	if tooLong != 1 || len(lines) != 2 || lines[0] != ok || lines[1] != ok {
		t.Errorf("lines %q, %d too long", lines, tooLong)
	}
}

// flaky returns its chunks one per Read, with an error after each: a serial
// port whose reads time out in the middle of a line.
type flaky struct{ chunks []string }

var errTimeout = errors.New("read timeout")

func (f *flaky) Read(p []byte) (int, error) {
	if len(f.chunks) == 0 {
		return 0, io.EOF
	}
	n := copy(p, f.chunks[0])
	f.chunks = f.chunks[1:]
	return n, errTimeout
}

func TestReaderKeepsPartialLineAcrossErrors(t *testing.T) {
	r := lineproto.NewReader(&flaky{chunks: []string{"$WIMWV,12", "0,R,002.", "10,M,A*0E\r", "\nnext\n"}}, 0)
	var got []string
	for range 20 {
		line, err := r.ReadLine()
		if errors.Is(err, io.EOF) {
			break
		}
		if errors.Is(err, errTimeout) {
			continue
		}
		if err != nil {
			t.Fatal(err)
		}
		got = append(got, line)
	}
	if strings.Join(got, "|") != "$WIMWV,120,R,002.10,M,A*0E|next" {
		t.Errorf("lines %q", got)
	}
}

func TestReaderPartialLineTooLongAcrossErrors(t *testing.T) {
	chunks := []string{strings.Repeat("y", 10), strings.Repeat("y", 10), strings.Repeat("y", 10), "\nok\n"}
	r := lineproto.NewReader(&flaky{chunks: chunks}, 16)
	var got []string
	tooLong := 0
	for range 20 {
		line, err := r.ReadLine()
		if errors.Is(err, io.EOF) {
			break
		}
		switch {
		case errors.Is(err, lineproto.ErrLineTooLong):
			tooLong++
		case errors.Is(err, errTimeout):
		case err != nil:
			t.Fatal(err)
		default:
			got = append(got, line)
		}
	}
	if tooLong == 0 || strings.Join(got, "|") != "ok" {
		t.Errorf("lines %q, %d too long", got, tooLong)
	}
}

// FuzzReader compares the Reader with splitting the whole input on '\n'
// with the standard library: every line of at most max bytes (after
// removing one trailing '\r') comes out, in order, and nothing else.
func FuzzReader(f *testing.F) {
	for _, s := range []string{"", "\n", "a\r\nb", "\r\r\n\r", strings.Repeat("z", 40) + "\nshort\n", "x\n\n\ny"} {
		f.Add([]byte(s), uint8(8))
	}
	f.Fuzz(func(t *testing.T, in []byte, max8 uint8) {
		max := int(max8%32) + 1
		var want []string
		segs := strings.Split(string(in), "\n")
		for i, s := range segs {
			if i == len(segs)-1 && s == "" {
				break // nothing after the last LF
			}
			s = strings.TrimSuffix(s, "\r")
			if len(s) <= max {
				want = append(want, s)
			}
		}
		for _, src := range []io.Reader{bytes.NewReader(in), iotest.OneByteReader(bytes.NewReader(in))} {
			got, _ := readAll(t, lineproto.NewReader(src, max), 4*len(in)+10)
			if strings.Join(got, "\x00|") != strings.Join(want, "\x00|") || len(got) != len(want) {
				t.Fatalf("max %d, input %q:\n got  %q\n want %q", max, in, got, want)
			}
		}
	})
}
