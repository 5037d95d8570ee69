package buffer

import (
	"encoding/binary"
	"errors"
	"fmt"
	"hash/fnv"
	"io"
)

// This file reads bbolt's on-disk format (version 2) directly, with bounds
// checks on every field, for the two jobs bbolt cannot do safely on a bad
// file: checking it before bbolt maps it (bbolt trusts page ids and offsets,
// and a bad one faults or panics), and salvaging records from a file bbolt
// cannot open.
//
// IMPORTANT: bbolt writes its structures in the machine's byte order. Every
// target of this project (amd64, arm, arm64) is little endian.
//
//	page header, 16 bytes: id u64, flags u16, count u16, overflow u32
//	leaf element, 16 bytes: flags u32, pos u32, ksize u32, vsize u32
//	    (key at element + pos, value right after it)
//	branch element, 16 bytes: pos u32, ksize u32, pgid u64
//	meta, after the header: magic u32, version u32, pageSize u32, flags u32,
//	    root {pgid u64, sequence u64}, freelist u64, pgid u64, txid u64,
//	    checksum u64 (FNV-1a 64 of the fields before it)
//	bucket value: {root pgid u64, sequence u64}, then, when root is 0, the
//	    bucket's own leaf page inline
const (
	pageHeaderSize = 16
	elemSize       = 16

	branchPageFlag   = 0x01
	leafPageFlag     = 0x02
	metaPageFlag     = 0x04
	freelistPageFlag = 0x10
	bucketLeafFlag   = 0x01

	boltMagic     = 0xED0CDAED
	boltVersion   = 2
	metaSize      = 64
	noFreelist    = ^uint64(0)
	maxPageSpan   = 64 << 20 // a page with its overflow; larger is garbage
	maxTreeDepth  = 64
	inBucketSize  = 16
	minPageSize   = 512
	maxPageSize   = 1 << 24
	metaPagesRead = 0x1000
)

var le = binary.LittleEndian

// errCorrupt marks the errors of the raw reader: the file is not a sound
// bbolt file.
var errCorrupt = errors.New("corrupt")

func corruptf(format string, args ...any) error {
	return fmt.Errorf("%w: "+format, append([]any{errCorrupt}, args...)...)
}

// boltMeta is a decoded meta page.
type boltMeta struct {
	pageSize uint32
	root     uint64 // root bucket's page
	freelist uint64
	pgid     uint64 // high water mark: pages [0, pgid) are in use or free
	txid     uint64
}

// parseMeta decodes the meta page at the start of p, or reports false when
// its magic, version or checksum is wrong.
func parseMeta(p []byte) (boltMeta, bool) {
	if len(p) < pageHeaderSize+metaSize {
		return boltMeta{}, false
	}
	m := p[pageHeaderSize : pageHeaderSize+metaSize]
	if le.Uint32(m[0:]) != boltMagic || le.Uint32(m[4:]) != boltVersion {
		return boltMeta{}, false
	}
	h := fnv.New64a()
	h.Write(m[:56])
	if h.Sum64() != le.Uint64(m[56:]) {
		return boltMeta{}, false
	}
	bm := boltMeta{
		pageSize: le.Uint32(m[8:]),
		root:     le.Uint64(m[16:]),
		freelist: le.Uint64(m[32:]),
		pgid:     le.Uint64(m[40:]),
		txid:     le.Uint64(m[48:]),
	}
	if bm.pageSize < minPageSize || bm.pageSize > maxPageSize || bm.pageSize&(bm.pageSize-1) != 0 {
		return boltMeta{}, false
	}
	return bm, true
}

// metas reads both meta pages of r. valid counts the good ones; m is the
// one bbolt would use (the good one with the higher txid).
func metas(r io.ReaderAt, size int64) (m boltMeta, valid int) {
	var buf [metaPagesRead]byte
	var m0, m1 boltMeta
	var ok0, ok1 bool
	if n, _ := r.ReadAt(buf[:], 0); n >= pageHeaderSize+metaSize {
		m0, ok0 = parseMeta(buf[:n])
	}
	// The second meta page is one page in; without a good first page, try
	// every page size bbolt could have used.
	sizes := []int64{int64(m0.pageSize)}
	if !ok0 {
		sizes = sizes[:0]
		for s := int64(1024); s <= 1<<24; s <<= 1 {
			sizes = append(sizes, s)
		}
	}
	for _, s := range sizes {
		if s+pageHeaderSize+metaSize > size {
			break
		}
		n, _ := r.ReadAt(buf[:], s)
		if m1, ok1 = parseMeta(buf[:n]); ok1 && int64(m1.pageSize) == s {
			break
		}
		ok1 = false
	}
	switch {
	case ok0 && ok1:
		if m1.txid > m0.txid {
			return m1, 2
		}
		return m0, 2
	case ok0:
		return m0, 1
	case ok1:
		return m1, 1
	}
	return boltMeta{}, 0
}

// rawPage is a page (with its overflow pages) or an inline bucket page.
type rawPage []byte

func (p rawPage) id() uint64       { return le.Uint64(p[0:]) }
func (p rawPage) flags() uint16    { return le.Uint16(p[8:]) }
func (p rawPage) count() int       { return int(le.Uint16(p[10:])) }
func (p rawPage) overflow() uint32 { return le.Uint32(p[12:]) }

// elems checks that the element table of p fits in p.
func (p rawPage) elems() (int, error) {
	if len(p) < pageHeaderSize {
		return 0, corruptf("page shorter than its header")
	}
	n := p.count()
	if pageHeaderSize+n*elemSize > len(p) {
		return 0, corruptf("page %d: %d elements overflow the page", p.id(), n)
	}
	return n, nil
}

// leaf returns element i of the leaf page p, bounds-checked.
func (p rawPage) leaf(i int) (flags uint32, k, v []byte, err error) {
	e := pageHeaderSize + i*elemSize
	flags = le.Uint32(p[e:])
	pos, ks, vs := uint64(le.Uint32(p[e+4:])), uint64(le.Uint32(p[e+8:])), uint64(le.Uint32(p[e+12:]))
	start := uint64(e) + pos
	if pos == 0 || start+ks+vs > uint64(len(p)) {
		return 0, nil, nil, corruptf("page %d: leaf element %d out of bounds", p.id(), i)
	}
	return flags, p[start : start+ks], p[start+ks : start+ks+vs], nil
}

// branch returns element i of the branch page p, bounds-checked.
func (p rawPage) branch(i int) (k []byte, child uint64, err error) {
	e := pageHeaderSize + i*elemSize
	pos, ks := uint64(le.Uint32(p[e:])), uint64(le.Uint32(p[e+4:]))
	child = le.Uint64(p[e+8:])
	start := uint64(e) + pos
	if pos == 0 || start+ks > uint64(len(p)) {
		return nil, 0, corruptf("page %d: branch element %d out of bounds", p.id(), i)
	}
	return p[start : start+ks], child, nil
}
