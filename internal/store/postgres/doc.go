// Package postgres implements store.Store on PostgreSQL (pgx, pgxpool),
// for runners that share state across replicas. Every write is one
// statement or one transaction; the event sequence and the turn
// compare-and-set rest on row locks and unique keys, so replicas need no
// coordination beyond the database. The schema is migrated at Open under
// an advisory lock, so replicas may start together. Tables live in the
// first schema of the connection's search_path.
package postgres
