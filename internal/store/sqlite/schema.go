package sqlite

import (
	"context"
	"database/sql"
	"fmt"
)

// migrations are the schema versions in order: migrations[i] takes the
// database from version i to i+1. Append only; never edit a shipped one.
// Times are unix milliseconds (0 = unset).
var migrations = []string{
	// 1: the initial schema.
	`
CREATE TABLE sessions (
	id               TEXT PRIMARY KEY,
	project_id       TEXT NOT NULL,
	harness          TEXT NOT NULL,
	status           TEXT NOT NULL,
	sandbox_provider TEXT NOT NULL,
	sandbox_id       TEXT NOT NULL,
	agent_session_id TEXT NOT NULL,
	last_turn_index  INTEGER NOT NULL DEFAULT -1,
	last_seq         INTEGER NOT NULL DEFAULT 0,
	created_at       INTEGER NOT NULL,
	updated_at       INTEGER NOT NULL
) STRICT;
CREATE INDEX sessions_updated ON sessions (updated_at DESC, id);

CREATE TABLE turns (
	session_id       TEXT NOT NULL REFERENCES sessions (id),
	turn_index       INTEGER NOT NULL,
	turn_id          TEXT NOT NULL,
	harness          TEXT NOT NULL,
	agent_session_id TEXT NOT NULL,
	sandbox_provider TEXT NOT NULL,
	sandbox_id       TEXT NOT NULL,
	status           TEXT NOT NULL,
	started_at       INTEGER NOT NULL,
	ended_at         INTEGER NOT NULL,
	input_tokens     INTEGER NOT NULL,
	output_tokens    INTEGER NOT NULL,
	total_tokens     INTEGER NOT NULL,
	cost             REAL NOT NULL,
	stop_reason      TEXT NOT NULL,
	error            TEXT NOT NULL,
	owner            TEXT NOT NULL,
	PRIMARY KEY (session_id, turn_index)
) STRICT;
CREATE INDEX turns_running ON turns (owner) WHERE status = 'running';

-- The session's last_seq numbers the events; AppendEvents bumps it in the
-- transaction that inserts them.
CREATE TABLE events (
	session_id TEXT NOT NULL,
	seq        INTEGER NOT NULL,
	turn_index INTEGER NOT NULL,
	at         INTEGER NOT NULL,
	event      TEXT NOT NULL,
	PRIMARY KEY (session_id, seq)
) STRICT;

CREATE TABLE sandboxes (
	provider   TEXT NOT NULL,
	id         TEXT NOT NULL,
	session_id TEXT NOT NULL,
	state      TEXT NOT NULL,
	labels     TEXT NOT NULL,
	created_at INTEGER NOT NULL,
	updated_at INTEGER NOT NULL,
	PRIMARY KEY (provider, id)
) STRICT;

CREATE TABLE secrets (
	provider   TEXT NOT NULL,
	id         TEXT NOT NULL,
	name       TEXT NOT NULL,
	session_id TEXT NOT NULL,
	created_at INTEGER NOT NULL,
	PRIMARY KEY (provider, id)
) STRICT;

CREATE TABLE leases (
	session_id TEXT PRIMARY KEY,
	owner      TEXT NOT NULL,
	expires_at INTEGER NOT NULL
) STRICT;
`,
}

// migrate brings db to len(migs), in one transaction. It refuses a
// database newer than migs, written by a later runner.
func migrate(ctx context.Context, db *sql.DB, migs []string) error {
	tx, err := db.BeginTx(ctx, nil)
	if err != nil {
		return fmt.Errorf("migrate: %w", err)
	}
	defer tx.Rollback()
	if _, err := tx.ExecContext(ctx, `CREATE TABLE IF NOT EXISTS schema_migrations (
	version    INTEGER PRIMARY KEY,
	applied_at INTEGER NOT NULL
) STRICT`); err != nil {
		return fmt.Errorf("migrate: %w", err)
	}
	var v int
	if err := tx.QueryRowContext(ctx, `SELECT COALESCE(MAX(version), 0) FROM schema_migrations`).Scan(&v); err != nil {
		return fmt.Errorf("migrate: %w", err)
	}
	if v > len(migs) {
		return fmt.Errorf("schema version %d is newer than this runner's %d; upgrade the runner", v, len(migs))
	}
	for ; v < len(migs); v++ {
		if _, err := tx.ExecContext(ctx, migs[v]); err != nil {
			return fmt.Errorf("migrate to version %d: %w", v+1, err)
		}
		if _, err := tx.ExecContext(ctx, `INSERT INTO schema_migrations (version, applied_at) VALUES (?, ?)`, v+1, nowMS()); err != nil {
			return fmt.Errorf("migrate to version %d: %w", v+1, err)
		}
	}
	if err := tx.Commit(); err != nil {
		return fmt.Errorf("migrate: %w", err)
	}
	return nil
}
