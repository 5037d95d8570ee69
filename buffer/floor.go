package buffer

import (
	"bufio"
	"fmt"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"time"
)

// The seq floor is a small file next to the buffer, <path>.seq, holding a
// number that no seq has reached. The writer reserves seqs in blocks: before
// it hands out a seq at or above the floor, it writes a new floor
// seqReserve higher (temporary file, fsync, rename, directory fsync). A
// salvage starts the new file's sequence above the floor, so that seqs go on
// increasing even when nothing of the old file could be read, and the
// platform never sees an id twice even if it ignores Epoch.
//
// The floor is best effort: if it cannot be written (disk full), seqs are
// still handed out, and a later salvage may only start above the seqs it
// found. The epoch still tells the packets apart.
const (
	floorSuffix  = ".seq"
	floorHeader  = "fieldlink buffer seq floor"
	seqReserve   = 1 << 16
	floorBackoff = time.Minute
)

// readFloor returns the floor stored next to path, or 0.
func readFloor(path string) uint64 {
	f, err := os.Open(path + floorSuffix)
	if err != nil {
		return 0
	}
	defer f.Close()
	sc := bufio.NewScanner(f)
	if !sc.Scan() || sc.Text() != floorHeader || !sc.Scan() {
		return 0
	}
	n, err := strconv.ParseUint(strings.TrimSpace(sc.Text()), 10, 64)
	if err != nil {
		return 0
	}
	return n
}

// writeFloor stores floor next to path, atomically.
func writeFloor(path string, floor uint64) error {
	tmp := path + floorSuffix + ".tmp"
	f, err := os.OpenFile(tmp, os.O_WRONLY|os.O_CREATE|os.O_TRUNC, 0o600)
	if err != nil {
		return err
	}
	_, err = fmt.Fprintf(f, "%s\n%d\n", floorHeader, floor)
	if err == nil {
		err = f.Sync()
	}
	if cerr := f.Close(); err == nil {
		err = cerr
	}
	if err == nil {
		err = os.Rename(tmp, path+floorSuffix)
	}
	if err == nil {
		err = syncDir(filepath.Dir(path))
	}
	if err != nil {
		_ = os.Remove(tmp)
	}
	return err
}

// reserve makes sure the floor is above seq before seq is handed out.
func (w *writer) reserve(seq uint64) {
	if seq < w.floor || time.Now().Before(w.floorRetry) {
		return
	}
	floor := seq + seqReserve
	if err := writeFloor(w.b.path, floor); err != nil {
		w.floorRetry = time.Now().Add(floorBackoff)
		w.b.log.Warn("buffer: could not reserve seqs in the floor file", "path", w.b.path+floorSuffix, "err", err)
		return
	}
	w.floor = floor
}
