// Package buffer is the gateway's store-and-forward queue: every packet is
// appended to a bbolt file before delivery and deleted only after an
// upstream acknowledged it, so that nothing is lost through outages, kill -9
// or power cuts.
//
// # Records
//
// A record is one packet's JSON, stored under its sequence number: an 8-byte
// big-endian key from the NextSequence of one dedicated bucket, taken in the
// transaction that stores the record. Seq is therefore strictly increasing
// across the alarm and the normal queue, across restarts and crashes, and
// never reused once a record carrying it was committed. A file rebuilt after
// corruption gets a new random [Buffer.Epoch]; every packet carries the epoch
// in DataHead, so (GatewayId, Epoch, Seq) never names two packets.
//
// bbolt checksums its meta pages, not its data pages, so every record
// carries a CRC32C of its key and value, checked on every read. A record
// that fails it is skipped, deleted and counted, never returned.
//
// # Writes
//
// One goroutine, the writer, owns every write transaction. Appends and acks
// that arrive together share a transaction (group commit): with
// [Always] durability, whatever queued up while the previous commit was
// syncing; with [Interval], whatever arrives within Options.SyncEvery. A poll
// cycle's packets can be appended in one call with [Buffer.AppendAll]. bbolt
// fsyncs twice per commit; the buffer never turns that off.
//
// A commit writes whole pages: the leaf that takes the cycle's records, the
// leaf that loses the acked ones, the branch and bucket pages above them,
// the state's page, the freelist and the meta page. New files (and compacted
// ones) take 1 KiB pages, not bbolt's 4 KiB, which halves what a small
// cycle writes (10 packets of a 20-register device: 3.9 times their bytes,
// was 7.7; see docs/footprint.md); a file made before keeps its page size
// until a compaction rewrites it. With pages that small, a full file needs
// room to commit the acks that would free it (bbolt writes the new pages
// before the old ones are free): where the file has a bound, appends stop
// short of it by a reserve that only a transaction without records may use,
// and after a commit failed on a full disk the pending acks commit first,
// alone, before the next appends.
//
// IMPORTANT: an EIO from a write or an fsync is fatal ([ErrFatal]): the
// kernel may have dropped the dirty pages, and a retried fsync would report
// success. The caller must close the buffer and Open it again, or exit and
// be restarted; the gateway reopens it (buffer/cardstore) and meanwhile
// keeps its live readings in a volatile buffer. A full disk is not fatal
// ([ErrDiskFull]): the appends of the failed transaction are refused, the
// records committed before stay, and the buffer recovers by itself when
// space returns.
//
// # Delivery
//
// [Buffer.Lease] leases records in delivery order: alarms first, oldest
// first, then the rest in Options.Order. [Buffer.Ack] deletes delivered
// records, and [Buffer.AckLater] does so with the next commit instead of
// one of its own (what the delivery loop uses: a crash before it only sends
// the records again); [Buffer.Release] returns failed ones; [Buffer.DeadLetter] moves
// those an upstream refused for good out of the queue. Leases live in
// memory: after a restart every record is delivered again (at least once;
// the platform drops duplicates by id). Only records whose commit completed
// are ever returned.
//
// # Dead letters
//
// A dead letter is a record that an upstream refused for good (an HTTP 4xx),
// moved by [Buffer.DeadLetter], in one writer transaction, from its queue
// to the bucket "dead", which the first one creates: its value is kept as
// it was, CRC and all, behind a small header with the reason and a CRC of
// its own. Dead letters are never delivered again, are not in Len, Bytes or
// MaxBytes, and are exported with [Buffer.EachDead], oldest first, and
// deleted with [Buffer.PurgeDead]. They are bounded on their own: beyond
// 10,000 of them or 16 MiB, the oldest are dropped and counted. Salvage
// drops them (they are not queued data) and counts them as dropped.
//
// A file that has had a dead letter is one that versions before them no
// longer accept (the dead bucket, the state's format): a downgrade salvages
// it. Other files stay as they were.
//
// # Aux
//
// Beside the records, the file keeps small state that the gateway wants
// back after a restart, in the bucket "aux": [Buffer.PutAux],
// [Buffer.UpdateAux] (sets and deletes in one transaction) and
// [Buffer.DeleteAux] return once committed, at once even with [Interval]
// durability; [Buffer.Aux] reads a key and
// [Buffer.ScanAux] the keys under a prefix, in order. Aux values count as
// live bytes for compaction, which keeps them; salvage does not (they carry
// no checksum).
//
// # Bounds
//
// Options.MaxBytes bounds the live records and Options.WhenFull decides what
// gives: the oldest normal records, or the new packet. Alarms are evicted
// last. Options.MaxAge evicts old records. Every eviction and rejection is
// counted by reason in [Stats]. bbolt files never shrink, so the writer
// compacts the file online (into a new file, fsync, rename) when it is much
// larger than its live data.
//
// # Corruption
//
// [Open] never hands bbolt a file that could crash the process: it reads
// every page first, with bounds checks, then runs bbolt's own check (about
// 0.3 s for a million records with a warm page cache). A file that fails is
// moved aside and every record that still verifies is salvaged into a fresh
// file with a new epoch; the loss is logged at Error and counted. The gateway
// goes on: no crash loop. A panic or memory fault inside bbolt while the
// buffer runs is contained and returned as [ErrFatal]; the restarted process
// then finds and salvages the bad file.
//
// Seqs are reserved in blocks in a small file next to the buffer,
// <path>.seq, so that even a file lost entirely does not make seqs start
// again from 1.
//
// The package is written for Linux (flock, /proc); the on-disk format is
// bbolt's, little endian.
package buffer
