package buffer

import (
	"slices"
	"testing"
)

func TestStateFormats(t *testing.T) {
	st := state{seq: 9, gen: 3, n: [2]int64{1, 2}, bytes: [2]int64{100, 200}, low: [2]uint64{4, 5}, corrupt: 6, lostUncommitted: 7}
	v1 := st.encode()
	if v1[4] != 1 || len(v1) != 8+8*stateFieldsV1 {
		t.Fatalf("without dead letters: format %d, %d bytes", v1[4], len(v1))
	}
	if got, ok := decodeState(v1); !ok || got != st {
		t.Fatalf("format 1: %+v, %v", got, ok)
	}
	st.deadLetters, st.deadDropped, st.deadN, st.deadBytes = 8, 2, 6, 600
	v2 := st.encode()
	if v2[4] != stateFormat || len(v2) != 8+8*stateFields {
		t.Fatalf("with dead letters: format %d, %d bytes", v2[4], len(v2))
	}
	if got, ok := decodeState(v2); !ok || got != st {
		t.Fatalf("format 2: %+v, %v", got, ok)
	}
	// Each format has its own length; the CRC covers the format byte.
	for _, bad := range [][]byte{v1[:len(v1)-8], v2[:len(v2)-8], append(slices.Clone(v1), make([]byte, 32)...), nil, v1[:5]} {
		if _, ok := decodeState(bad); ok {
			t.Fatalf("a %d-byte state decodes", len(bad))
		}
	}
	w := slices.Clone(v2)
	w[4] = 1
	if _, ok := decodeState(w); ok {
		t.Fatal("format 2 read as format 1")
	}
}
