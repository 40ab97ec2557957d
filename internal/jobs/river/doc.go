// Package river is the jobs family on River (github.com/riverqueue/river):
// the runner's job records in a table of their own (runner_job) beside
// River's, in one SQLite file of the data dir or in the runner's
// PostgreSQL. Every run of a job is a River job whose attempts drive one
// ordinary session turn each through the runner's Service; schedules are
// fired by a periodic River job that only the elected leader enqueues;
// webhooks are River jobs of their own, retried with backoff.
//
// Execution is at least once and idempotent: an attempt first looks in
// the turn ledger for the turn of an attempt that never recorded its
// outcome (its replica died) and adopts a committed one instead of
// running it again. Queue is safe for concurrent use; Stop waits for the
// workers it started.
package river
