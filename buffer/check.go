package buffer

import (
	"bytes"
	"io"
)

// fileReport is what check learned about a file.
type fileReport struct {
	meta      boltMeta
	badMetas  int    // meta pages that failed their checksum (0 or 1)
	state     state  // from the meta bucket
	hasState  bool   // state was found and verified
	epoch     string // from the meta bucket
	ours      int    // top-level buckets of ours found, the dead bucket aside
	dead      bool   // the dead bucket was found (created by the first dead letter)
	strangers int    // top-level keys that are not ours
}

// check reads every page of the bbolt file r of the given size through its
// own bounds-checked reader, so that bbolt is only ever handed a file whose
// pages it can follow without faulting: every page id in range and inside
// the file, every element inside its page, keys sorted, no page reached
// twice, the freelist listing only pages not in use. It also reads the state
// and the epoch. It returns an error wrapping errCorrupt when the file is not
// sound.
//
// A single bad meta page is reported, not refused: bbolt then opens the
// other one, one transaction older, and Open recovers the newer records from
// the raw pages.
func check(r io.ReaderAt, size int64) (fileReport, error) {
	var rep fileReport
	m, valid := metas(r, size)
	if valid == 0 {
		return rep, corruptf("no valid meta page")
	}
	rep.meta, rep.badMetas = m, 2-valid
	ps := int64(m.pageSize)
	if m.pgid < 3 || m.pgid > uint64(size/ps) {
		return rep, corruptf("high water mark is %d pages, the file holds %d (truncated?)", m.pgid, size/ps)
	}
	c := &checker{r: r, ps: ps, hwm: m.pgid, seen: make([]uint64, (m.pgid+63)/64), rep: &rep}
	c.mark(0, 0)
	c.mark(1, 0)
	if err := c.walk(m.root, 0, kindRoot); err != nil {
		return rep, err
	}
	if err := c.freelist(m.freelist); err != nil {
		return rep, err
	}
	return rep, nil
}

// bucketKind tells the walker what a bucket's keys are.
type bucketKind uint8

const (
	kindRoot  bucketKind = iota // our top-level buckets
	kindMeta                    // epoch and state
	kindQueue                   // records
	kindOther                   // anything else
)

type checker struct {
	r    io.ReaderAt
	ps   int64
	hwm  uint64
	seen []uint64 // bitmap of the pages reached
	rep  *fileReport
	bufs [maxTreeDepth + 2][]byte // one page buffer per depth: a parent's page stays valid while its children are read
}

// mark records that pages id..id+overflow are in use, or reports false
// when one of them already was.
func (c *checker) mark(id uint64, overflow uint32) bool {
	for i := id; i <= id+uint64(overflow); i++ {
		if c.seen[i/64]&(1<<(i%64)) != 0 {
			return false
		}
		c.seen[i/64] |= 1 << (i % 64)
	}
	return true
}

// page reads page id with its overflow pages, and marks them reached. The
// page stays valid until page is called again at the same depth.
func (c *checker) page(id uint64, depth int) (rawPage, error) {
	if id < 2 || id >= c.hwm {
		return nil, corruptf("page id %d out of range [2, %d)", id, c.hwm)
	}
	if int64(cap(c.bufs[depth])) < c.ps {
		c.bufs[depth] = make([]byte, c.ps)
	}
	buf := c.bufs[depth][:c.ps]
	if _, err := c.r.ReadAt(buf, int64(id)*c.ps); err != nil {
		return nil, corruptf("page %d: %v", id, err)
	}
	if got := rawPage(buf).id(); got != id {
		return nil, corruptf("page %d says it is page %d", id, got)
	}
	ov := rawPage(buf).overflow()
	if uint64(ov) >= c.hwm-id || (int64(ov)+1)*c.ps > maxPageSpan {
		return nil, corruptf("page %d: overflow %d out of range", id, ov)
	}
	if !c.mark(id, ov) {
		return nil, corruptf("page %d reached twice", id)
	}
	if ov > 0 {
		n := (int64(ov) + 1) * c.ps
		if int64(cap(c.bufs[depth])) < n {
			c.bufs[depth] = append(make([]byte, 0, n), buf...)
		}
		buf = c.bufs[depth][:n]
		if _, err := c.r.ReadAt(buf[c.ps:], int64(id+1)*c.ps); err != nil {
			return nil, corruptf("page %d: %v", id, err)
		}
	}
	return rawPage(buf), nil
}

// walk checks the tree of pages rooted at page id, a bucket of the given kind.
func (c *checker) walk(id uint64, depth int, kind bucketKind) error {
	if depth > maxTreeDepth {
		return corruptf("tree deeper than %d", maxTreeDepth)
	}
	p, err := c.page(id, depth)
	if err != nil {
		return err
	}
	switch p.flags() {
	case branchPageFlag:
		n, err := p.elems()
		if err != nil {
			return err
		}
		if n == 0 {
			return corruptf("page %d: empty branch page", id)
		}
		var prev []byte
		for i := range n {
			k, child, err := p.branch(i)
			if err != nil {
				return err
			}
			if i > 0 && bytes.Compare(prev, k) >= 0 {
				return corruptf("page %d: branch keys out of order", id)
			}
			prev = k
			if err := c.walk(child, depth+1, kind); err != nil {
				return err
			}
		}
		return nil
	case leafPageFlag:
		return c.leaf(p, depth, kind)
	}
	return corruptf("page %d: flags %#x, want a branch or leaf page", id, p.flags())
}

// leaf checks the leaf page p (a real page or an inline one) of a bucket of
// the given kind, and the buckets it holds.
func (c *checker) leaf(p rawPage, depth int, kind bucketKind) error {
	if len(p) < pageHeaderSize || p.flags() != leafPageFlag {
		return corruptf("page %d: not a leaf page", p.id())
	}
	n, err := p.elems()
	if err != nil {
		return err
	}
	var prev []byte
	for i := range n {
		flags, k, v, err := p.leaf(i)
		if err != nil {
			return err
		}
		if i > 0 && bytes.Compare(prev, k) >= 0 {
			return corruptf("page %d: leaf keys out of order", p.id())
		}
		prev = k
		isBucket := flags&bucketLeafFlag != 0
		child := kindOther
		switch kind {
		case kindRoot:
			switch {
			case !isBucket:
				c.rep.strangers++
			case bytes.Equal(k, bucketMeta):
				c.rep.ours++
				child = kindMeta
			case bytes.Equal(k, bucketAlarm), bytes.Equal(k, bucketNormal):
				c.rep.ours++
				child = kindQueue
			case bytes.Equal(k, bucketSeq):
				c.rep.ours++
			case bytes.Equal(k, bucketDead):
				c.rep.dead = true
			case bytes.Equal(k, bucketAux):
			default:
				c.rep.strangers++
			}
		case kindMeta:
			switch {
			case isBucket:
			case bytes.Equal(k, keyState):
				c.rep.state, c.rep.hasState = decodeState(v)
			case bytes.Equal(k, keyEpoch):
				c.rep.epoch = string(v)
			}
		}
		if !isBucket {
			continue
		}
		if len(v) < inBucketSize {
			return corruptf("page %d: bucket %q: value too short", p.id(), k)
		}
		if depth+1 > maxTreeDepth {
			return corruptf("tree deeper than %d", maxTreeDepth)
		}
		if root := le.Uint64(v); root != 0 {
			if err := c.walk(root, depth+1, child); err != nil {
				return err
			}
			continue
		}
		if err := c.leaf(rawPage(v[inBucketSize:]), depth+1, child); err != nil {
			return err
		}
	}
	return nil
}

// freelist checks the freelist page: in range, and listing only pages that
// are not in use, each once.
func (c *checker) freelist(id uint64) error {
	if id == noFreelist {
		return nil
	}
	p, err := c.page(id, 0)
	if err != nil {
		return err
	}
	if p.flags() != freelistPageFlag {
		return corruptf("freelist page %d: flags %#x", id, p.flags())
	}
	start, n := pageHeaderSize, uint64(p.count())
	if n == 0xFFFF {
		if len(p) < pageHeaderSize+8 {
			return corruptf("freelist page %d: too short", id)
		}
		n, start = le.Uint64(p[pageHeaderSize:]), pageHeaderSize+8
	}
	if n > uint64(len(p)-start)/8 {
		return corruptf("freelist page %d: %d ids overflow the page", id, n)
	}
	for i := range n {
		f := le.Uint64(p[start+int(i)*8:])
		if f < 2 || f >= c.hwm {
			return corruptf("freelist: page id %d out of range", f)
		}
		if !c.mark(f, 0) {
			return corruptf("freelist: page %d is in use or listed twice", f)
		}
	}
	return nil
}
