package buffer

// reportCorrupt asks the writer to delete the records seqs, which failed
// their CRC on read. It does not wait, and gives up if the queue is full:
// the next read finds them again.
func (b *Buffer) reportCorrupt(seqs []uint64) {
	if len(seqs) == 0 {
		return
	}
	b.log.Error("buffer: records fail their CRC; deleting them", "path", b.path, "seqs", seqs)
	b.sendNoWait(&request{op: opDropCorrupt, seqs: seqs})
}

// dropCorrupt deletes the record seq if it (still) fails its CRC.
func (t *wtx) dropCorrupt(seq uint64) {
	k := itob(seq)
	for q := range t.q {
		if v := t.q[q].Get(k); v != nil && !validRecord(k, v) {
			size := recordSize(v)
			if err := t.q[q].Delete(k); err != nil {
				panic("buffer: delete: " + err.Error())
			}
			t.st.n[q]--
			t.st.bytes[q] -= size
			t.st.corrupt++
			t.deletes++
			t.gone = append(t.gone, seq)
		}
	}
}
