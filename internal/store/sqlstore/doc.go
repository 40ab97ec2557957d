// Package sqlstore is what the SQL implementations of store.Store
// (store/sqlite, store/postgres) share, and nothing that names a driver:
// the column lists their statements select, the scans that turn a row
// into a store type, and the time encoding (UTC unix milliseconds, 0 for
// unset). The statements themselves stay in each implementation: the
// dialects differ in placeholders, upserts, types and batching.
//
// A Scanner is *sql.Row, *sql.Rows, pgx.Row or pgx.Rows; a scan of a row
// that is not there returns the driver's own no-rows error, unwrapped, so
// each implementation maps it to errdefs.ErrNotFound as before.
package sqlstore
