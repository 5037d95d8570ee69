package lineproto

import (
	"errors"
	"testing"
)

// stream sends a pattern for ever, with a timeout error every few reads,
// and never a newline.
type stream struct{ reads int }

func (s *stream) Read(p []byte) (int, error) {
	s.reads++
	n := min(len(p), 7)
	for i := range n {
		p[i] = 'q'
	}
	if s.reads%3 == 0 {
		return n, errors.New("timeout")
	}
	return n, nil
}

// The Reader's memory stays bounded by its limit however long the line.
func TestReaderMemoryBounded(t *testing.T) {
	const max = 100
	r := NewReader(&stream{}, max)
	for range 10000 {
		_, _ = r.ReadLine()
		if cap(r.partial) > 2*(max+2) {
			t.Fatalf("partial line buffer grew to %d", cap(r.partial))
		}
	}
	if r.br.Size() != max+2 {
		t.Errorf("buffer size %d, want %d", r.br.Size(), max+2)
	}
}
