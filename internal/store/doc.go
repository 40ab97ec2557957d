// Package store is the runner's durable state: sessions, the append-only
// turn ledger, the per-session event log, the sandboxes and secrets the
// runner created, session leases between replicas (with the generation
// that fences an old owner) and the registry of the replicas themselves.
//
// Store is the union of seven small interfaces (Sessions, Turns, Events,
// Sandboxes, Secrets, Leases, Replicas) plus Close, so a consumer asks for
// only the part it uses. Implementations (store/sqlite, store/postgres)
// pass the storetest suite and are safe for concurrent use; they share
// column lists, row scans and time encoding through store/sqlstore.
//
// Every method takes a context first. A missing thing is reported as an
// error wrapping errdefs.ErrNotFound, a lost race or a state that forbids
// the change as errdefs.ErrConflict, bad input as errdefs.ErrInvalid.
// Times are UTC unix milliseconds; the store stamps CreatedAt/UpdatedAt,
// every other time (turns, events, the lease clock) is the caller's.
package store
