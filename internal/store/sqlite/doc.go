// Package sqlite implements store.Store on an embedded SQLite file
// (modernc.org/sqlite, pure Go, no cgo). The file runs in WAL mode with
// synchronous=NORMAL: a committed write survives a crash of the process;
// a power loss may drop the last few. Writes go through one connection,
// so they queue in the process instead of contending for the file lock;
// reads use a pool of read-only connections that never wait for a
// writer. Other processes may open the same file and wait up to the busy
// timeout for its lock. The schema is migrated at Open. A transaction
// costs far more than a row: append events in batches; AppendEvents calls
// that arrive together also share one transaction. A Store is safe for
// concurrent use.
package sqlite
