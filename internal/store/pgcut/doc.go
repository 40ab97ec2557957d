// Package pgcut dials a pgx pool's connections and cuts them all at the
// pool's close, so the close does not wait on a PostgreSQL server that
// stopped answering. The store (store/postgres) and the job queue
// (jobs/river) each open a pool with one. A Cutter is safe for
// concurrent use.
package pgcut
