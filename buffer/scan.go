package buffer

import (
	"bytes"
	"io"
	"os"
	"slices"
)

// scanResult is what a raw scan found.
type scanResult struct {
	pages     int64 // pages parsed
	bad       int64 // candidate records (8-byte keys) that failed their CRC
	states    int   // state copies that verified
	best      state // the newest state (highest gen)
	hasBest   bool
	low       [2]uint64 // the highest low watermark in any state copy
	maxSeq    uint64    // the highest seq of any record or state
	pageSizes []int64
}

// scanRecords reads every page of r, at every plausible page size, and calls
// fn for every leaf element with an 8-byte key whose value verifies as a
// record, including elements of inline buckets and of pages bbolt freed
// long ago. It trusts nothing in the file but the CRCs: this is how records
// are salvaged from a file that bbolt cannot open. The same record may be
// reported more than once (copies in freed pages); fn dedupes.
func scanRecords(r io.ReaderAt, size int64, fn func(k, v []byte) error) (scanResult, error) {
	var res scanResult
	m, valid := metas(r, size)
	if valid > 0 {
		res.pageSizes = []int64{int64(m.pageSize)}
	} else {
		// The page size of new files (pageSize), of files written before it
		// (bbolt's default: the OS page), and the OS pages of other machines.
		res.pageSizes = []int64{pageSize, int64(os.Getpagesize()), 4096, 16384, 65536}
		slices.Sort(res.pageSizes)
		res.pageSizes = slices.Compact(res.pageSizes)
	}
	for _, ps := range res.pageSizes {
		if err := scanPages(r, size, ps, &res, fn); err != nil {
			return res, err
		}
	}
	return res, nil
}

// scanChunk is how much of the file scanPages reads at a time.
const scanChunk = 4 << 20

func scanPages(r io.ReaderAt, size, ps int64, res *scanResult, fn func(k, v []byte) error) error {
	chunk := make([]byte, max(scanChunk/ps, 1)*ps)
	for off := int64(0); off < size; off += int64(len(chunk)) {
		n, err := r.ReadAt(chunk, off)
		if n <= 0 {
			if err != nil && err != io.EOF {
				return err
			}
			break
		}
		for p := int64(0); p+pageHeaderSize <= int64(n); p += ps {
			// Every page is read as a leaf, whatever its flags say: a
			// damaged header must not hide good records, and what is not a
			// record fails its CRC.
			page := rawPage(chunk[p:min(p+ps, int64(n))])
			if ov := int64(page.overflow()); ov > 0 {
				// A page that spills into the next ones: read it whole, if its
				// overflow is believable.
				span := (ov + 1) * ps
				if span > maxPageSpan || off+p+span > size {
					continue
				}
				whole := make([]byte, span)
				if _, err := r.ReadAt(whole, off+p); err != nil {
					continue
				}
				page = rawPage(whole)
			}
			res.pages++
			if err := scanLeaf(page, 0, res, fn); err != nil {
				return err
			}
		}
	}
	return nil
}

// scanLeaf reports the records of the leaf page p and of the inline buckets
// in it. Elements that do not fit are skipped, not fatal: other elements of
// the same page may still be good.
func scanLeaf(p rawPage, depth int, res *scanResult, fn func(k, v []byte) error) error {
	if depth > 4 || len(p) < pageHeaderSize {
		return nil
	}
	// The element count may be damaged: the first key starts where the
	// element table ends, which gives a second estimate.
	n := p.count()
	if len(p) >= pageHeaderSize+elemSize {
		n = max(n, int(le.Uint32(p[pageHeaderSize+4:]))/elemSize)
	}
	n = min(n, (len(p)-pageHeaderSize)/elemSize)
	for i := range n {
		flags, k, v, err := p.leaf(i)
		if err != nil {
			continue
		}
		if flags&bucketLeafFlag != 0 {
			if len(v) > inBucketSize+pageHeaderSize && le.Uint64(v) == 0 {
				if err := scanLeaf(rawPage(v[inBucketSize:]), depth+1, res, fn); err != nil {
					return err
				}
			}
			continue
		}
		switch {
		case len(k) == keySize:
			if !validRecord(k, v) {
				res.bad++
				continue
			}
			res.maxSeq = max(res.maxSeq, btoi(k))
			if err := fn(k, v); err != nil {
				return err
			}
		case bytes.Equal(k, keyState):
			st, ok := decodeState(v)
			if !ok {
				continue
			}
			res.states++
			res.maxSeq = max(res.maxSeq, st.seq)
			res.low[0], res.low[1] = max(res.low[0], st.low[0]), max(res.low[1], st.low[1])
			if !res.hasBest || st.gen > res.best.gen {
				res.best, res.hasBest = st, true
			}
		}
	}
	return nil
}
