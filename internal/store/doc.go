// Package store is the runner's durable state: sessions, the append-only
// turn ledger, the per-session event log, the sandboxes and secrets the
// runner created, and session leases between replicas.
//
// Store is the union of six small interfaces (Sessions, Turns, Events,
// Sandboxes, Secrets, Leases) plus Close, so a consumer asks for only the
// part it uses. Implementations (store/sqlite, store/postgres) pass the
// storetest suite and are safe for concurrent use; they share their
// column lists, row scans and time encoding through store/sqlstore.
//
// Every method takes a context first. A missing thing is reported as an
// error wrapping errdefs.ErrNotFound, a lost race or a state that forbids
// the change as errdefs.ErrConflict, bad input as errdefs.ErrInvalid.
// Times are stored as UTC unix milliseconds and read back in UTC. The
// store stamps CreatedAt/UpdatedAt itself; every other time (turn start
// and end, event time, the lease clock) comes from the caller.
package store
