package buffer

import (
	"fmt"
	"slices"
)

// Formats names the on-disk formats of a buffer file: bbolt's file format,
// the top-level buckets, and the versions of the record, state and
// dead-letter encodings (byte 4 of each value). A version opens a file
// without salvaging it only when it reads every format in it; an unknown
// record format is taken for corruption and dropped. An updater compares
// what a new version writes with what the installed one reads before it
// installs, so that a rollback never strands packets in a file the old
// version cannot read (gateway health -readable-by).
//
// Nothing here looks at a file: both lists are this package's own
// constants, read-only.
type Formats struct {
	Bolt    []int    `json:"bolt"`
	Buckets []string `json:"buckets"`
	Record  []int    `json:"record"`
	State   []int    `json:"state"`
	Dead    []int    `json:"dead"`
}

// ReadFormats returns the formats this version opens as they are.
func ReadFormats() Formats {
	return Formats{
		Bolt:    []int{boltVersion},
		Buckets: bucketNames(),
		Record:  []int{recordFormat},
		State:   []int{1, stateFormat},
		Dead:    []int{deadFormat},
	}
}

// WriteFormats returns the formats this version may write: today every
// format it reads (state format 1 while a file has never had a dead letter,
// 2 after). A new format is read by one release and written by a later one,
// so that the release in between can be rolled back to.
func WriteFormats() Formats { return ReadFormats() }

func bucketNames() []string {
	var names []string
	for _, b := range [][]byte{bucketMeta, bucketSeq, bucketAlarm, bucketNormal, bucketDead, bucketAux} {
		names = append(names, string(b))
	}
	return names
}

// Unreadable returns what of written (the formats one version writes) r
// (the formats another version reads) does not read, one phrase per
// format, such as "record format 2"; none means every file the writer makes
// is one the reader opens.
func (r Formats) Unreadable(written Formats) []string {
	var out []string
	ints := func(what string, w, rd []int) {
		for _, v := range w {
			if !slices.Contains(rd, v) {
				out = append(out, fmt.Sprintf("%s format %d", what, v))
			}
		}
	}
	ints("bbolt file", written.Bolt, r.Bolt)
	for _, b := range written.Buckets {
		if !slices.Contains(r.Buckets, b) {
			out = append(out, fmt.Sprintf("bucket %q", b))
		}
	}
	ints("record", written.Record, r.Record)
	ints("state", written.State, r.State)
	ints("dead-letter", written.Dead, r.Dead)
	return out
}
