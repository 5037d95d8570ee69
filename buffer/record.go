package buffer

import (
	"encoding/binary"
	"hash/crc32"
	"time"
)

// Record is one stored packet, as Lease, Peek, Each and EachDead return it.
type Record struct {
	Seq   uint64    // the packet's sequence number, also its key
	Alarm bool      // delivered before all normal records
	At    time.Time // the reading time (the append time if the packet had none)
	Data  []byte    // the packet's JSON; a copy that the caller owns
}

// Bucket names. The queue buckets and the sequence bucket are created once,
// with the file, and never deleted: deleting a bucket resets its sequence.
// The dead bucket is created by the first DeadLetter that moves a record
// (files of older versions lack it), and never deleted either.
var (
	bucketMeta   = []byte("meta")   // epoch, state
	bucketSeq    = []byte("seq")    // no keys; its NextSequence numbers every record
	bucketAlarm  = []byte("alarm")  // seq → record, alarms
	bucketNormal = []byte("normal") // seq → record, everything else
	bucketDead   = []byte("dead")   // (order, seq) → reason and record, dead letters
	bucketAux    = []byte("aux")    // name → value: small state kept with the buffer (PutAux)

	keyEpoch = []byte("epoch")
	keyState = []byte("state")
)

// The two queues, indexes into per-queue arrays.
const (
	qAlarm  = 0
	qNormal = 1
)

var queueBuckets = [2][]byte{bucketAlarm, bucketNormal}

// A record's value is a 16-byte header and the JSON:
//
//	0:4   CRC32C (Castagnoli) of the 8-byte key followed by bytes 4: of the value
//	4     format, recordFormat
//	5     flags, flagAlarm
//	6:8   zero
//	8:16  reading time, Unix nanoseconds, big endian
//	16:   the packet's JSON
//
// bbolt checksums its meta pages but not its data pages, so every record
// carries its own CRC, which also covers the key: a record that reads back
// under another key does not verify.
const (
	headerSize   = 16
	keySize      = 8
	recordFormat = 1
	flagAlarm    = 1 << 0
)

var castagnoli = crc32.MakeTable(crc32.Castagnoli)

// itob returns seq as an 8-byte big-endian key, so that keys sort by seq.
func itob(seq uint64) []byte {
	k := make([]byte, keySize)
	binary.BigEndian.PutUint64(k, seq)
	return k
}

// btoi is the inverse of itob.
func btoi(k []byte) uint64 { return binary.BigEndian.Uint64(k) }

// recordCRC returns the checksum of a record with key k and value v.
func recordCRC(k, v []byte) uint32 {
	return crc32.Update(crc32.Update(0, castagnoli, k), castagnoli, v[4:])
}

// sealRecord fills in the header of v, which must have headerSize bytes
// before the JSON, and its CRC.
func sealRecord(k, v []byte, alarm bool, at int64) {
	v[4] = recordFormat
	v[5] = 0
	if alarm {
		v[5] = flagAlarm
	}
	v[6], v[7] = 0, 0
	binary.BigEndian.PutUint64(v[8:16], uint64(at))
	binary.BigEndian.PutUint32(v[0:4], recordCRC(k, v))
}

// validRecord reports whether k and v form a record that verifies.
func validRecord(k, v []byte) bool {
	return len(k) == keySize && len(v) >= headerSize && v[4] == recordFormat &&
		binary.BigEndian.Uint32(v[0:4]) == recordCRC(k, v)
}

// decodeRecord returns the record stored under k as v, with Data copied out
// of v (which dies with its transaction), or false when it does not verify.
func decodeRecord(k, v []byte) (Record, bool) {
	if !validRecord(k, v) {
		return Record{}, false
	}
	return Record{
		Seq:   btoi(k),
		Alarm: v[5]&flagAlarm != 0,
		At:    time.Unix(0, int64(binary.BigEndian.Uint64(v[8:16]))),
		Data:  append([]byte(nil), v[headerSize:]...),
	}, true
}

// recordAlarm reports whether the (verified) value v is an alarm.
func recordAlarm(v []byte) bool { return v[5]&flagAlarm != 0 }

// recordAt returns the reading time of the (verified) value v, in Unix
// nanoseconds.
func recordAt(v []byte) int64 { return int64(binary.BigEndian.Uint64(v[8:16])) }

// recordSize is what a record counts against MaxBytes.
func recordSize(v []byte) int64 { return int64(len(v)) + keySize }

// state is the buffer's bookkeeping, kept in the meta bucket under
// keyState and rewritten in every write transaction, so that it always
// matches the records: Open reads the counts instead of scanning millions of
// records. It carries its own CRC so that salvage can trust the copies it
// finds in raw pages.
type state struct {
	clean bool      // written by Close; cleared by Open
	seq   uint64    // the sequence at this commit: every seq ≤ seq was issued
	gen   uint64    // incremented by every commit: the newest copy wins
	n     [2]int64  // records, by queue
	bytes [2]int64  // record bytes (recordSize), by queue
	low   [2]uint64 // by queue: every record below low is deleted (first key, or seq+1 when empty)

	// Counters, since the file was created (salvage carries them over).
	evictedMaxBytes uint64
	evictedMaxAge   uint64
	rejectedFull    uint64
	corrupt         uint64 // records that failed their CRC while the file was open, deleted
	salvageLost     uint64 // records a salvage could not recover (an estimate)
	salvages        uint64
	compactions     uint64
	lostUncommitted uint64 // Interval appends that returned, then could not be committed
	deadLetters     uint64 // records moved to the dead bucket
	deadDropped     uint64 // dead letters dropped to stay within the bound, or by a salvage

	deadN     int64 // dead letters stored
	deadBytes int64 // their bytes (deadSize)
}

// Format 2 added the dead-letter fields. Format 1, without them, is still
// written while they are all zero, so that a file that never had a dead
// letter stays one that versions before them open (a downgrade does not
// salvage it); it is read with them zero.
const (
	stateFormat   = 2
	stateFields   = 20 // uint64 fields after the 8-byte prefix
	stateFieldsV1 = 16
)

// encode returns s as a value: CRC32C of bytes 4:, format, flags, two zero
// bytes, then the fields as big-endian uint64s.
func (s *state) encode() []byte {
	f := [stateFields]uint64{
		s.seq, s.gen,
		uint64(s.n[0]), uint64(s.n[1]), uint64(s.bytes[0]), uint64(s.bytes[1]),
		s.low[0], s.low[1],
		s.evictedMaxBytes, s.evictedMaxAge, s.rejectedFull, s.corrupt,
		s.salvageLost, s.salvages, s.compactions, s.lostUncommitted,
		s.deadLetters, s.deadDropped, uint64(s.deadN), uint64(s.deadBytes),
	}
	format, fields := byte(stateFormat), stateFields
	if s.deadLetters == 0 && s.deadDropped == 0 && s.deadN == 0 && s.deadBytes == 0 {
		format, fields = 1, stateFieldsV1
	}
	v := make([]byte, 8+8*fields)
	v[4] = format
	if s.clean {
		v[5] = 1
	}
	for i, x := range f[:fields] {
		binary.BigEndian.PutUint64(v[8+8*i:], x)
	}
	binary.BigEndian.PutUint32(v[0:4], crc32.Checksum(v[4:], castagnoli))
	return v
}

// decodeState parses a value written by encode (or by format 1's), or
// reports false.
func decodeState(v []byte) (state, bool) {
	fields := stateFields
	if len(v) > 4 && v[4] == 1 {
		fields = stateFieldsV1
	}
	if len(v) != 8+8*fields || (v[4] != 1 && v[4] != stateFormat) ||
		binary.BigEndian.Uint32(v[0:4]) != crc32.Checksum(v[4:], castagnoli) {
		return state{}, false
	}
	var f [stateFields]uint64
	for i := range fields {
		f[i] = binary.BigEndian.Uint64(v[8+8*i:])
	}
	s := state{
		clean: v[5]&1 != 0,
		seq:   f[0], gen: f[1],
		n:     [2]int64{int64(f[2]), int64(f[3])},
		bytes: [2]int64{int64(f[4]), int64(f[5])},
		low:   [2]uint64{f[6], f[7]},

		evictedMaxBytes: f[8], evictedMaxAge: f[9], rejectedFull: f[10], corrupt: f[11],
		salvageLost: f[12], salvages: f[13], compactions: f[14], lostUncommitted: f[15],
		deadLetters: f[16], deadDropped: f[17], deadN: int64(f[18]), deadBytes: int64(f[19]),
	}
	if s.n[0] < 0 || s.n[1] < 0 || s.bytes[0] < 0 || s.bytes[1] < 0 || s.deadN < 0 || s.deadBytes < 0 {
		return state{}, false
	}
	return s, true
}
