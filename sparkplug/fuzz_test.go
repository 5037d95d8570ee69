package sparkplug

import (
	"bytes"
	"reflect"
	"testing"

	"google.golang.org/protobuf/encoding/protowire"
)

// FuzzUnmarshal checks the decoder on any input: it never panics; what it
// accepts, protobuf-go's wire reader (the reference) reads as a sequence
// of well-formed fields too; and what it decodes encodes to bytes that
// decode to the same payload and encode to the same bytes again.
func FuzzUnmarshal(f *testing.F) {
	for _, p := range samplePayloads() {
		f.Add(p.Marshal())
	}
	f.Add(deepProperties(maxDepth))
	f.Add([]byte{0x12, 0x03, 0x8a, 0x01, 0x00})
	f.Fuzz(func(t *testing.T, b []byte) {
		p, err := Unmarshal(b)
		if err != nil {
			return
		}
		for rest := b; len(rest) > 0; {
			_, _, n := protowire.ConsumeField(rest)
			if n < 0 {
				t.Fatalf("Unmarshal accepted %x, which protowire rejects: %v", b, protowire.ParseError(n))
			}
			rest = rest[n:]
		}
		enc := p.Marshal()
		q, err := Unmarshal(enc)
		if err != nil {
			t.Fatalf("Unmarshal of Marshal's output %x: %v", enc, err)
		}
		if !reflect.DeepEqual(p, q) {
			t.Fatalf("round trip differs:\n got %+v\nwant %+v", q, p)
		}
		if again := q.Marshal(); !bytes.Equal(again, enc) {
			t.Fatalf("Marshal is not stable:\n%x\n%x", enc, again)
		}
	})
}
