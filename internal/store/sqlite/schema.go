package sqlite

import (
	"context"
	"database/sql"
	"fmt"

	"github.com/agentrunner/runner/internal/store/sqlstore"
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
	// 2: sessions are keyed by (project, id): the same id in two projects
	// is two sessions. Every row keeps the project its session was
	// recorded with (a session row's project_id); a lease, sandbox or
	// secret whose session has no row gets the empty project, that of
	// requests naming none. SQLite cannot change a primary key in place:
	// the keyed tables are rebuilt, children first, so that no foreign
	// key ever points at a dropped table.
	`
CREATE TABLE sessions_v2 (
	project_id       TEXT NOT NULL,
	id               TEXT NOT NULL,
	harness          TEXT NOT NULL,
	status           TEXT NOT NULL,
	sandbox_provider TEXT NOT NULL,
	sandbox_id       TEXT NOT NULL,
	agent_session_id TEXT NOT NULL,
	last_turn_index  INTEGER NOT NULL DEFAULT -1,
	last_seq         INTEGER NOT NULL DEFAULT 0,
	created_at       INTEGER NOT NULL,
	updated_at       INTEGER NOT NULL,
	PRIMARY KEY (project_id, id)
) STRICT;
INSERT INTO sessions_v2 (project_id, id, harness, status, sandbox_provider, sandbox_id,
	agent_session_id, last_turn_index, last_seq, created_at, updated_at)
SELECT project_id, id, harness, status, sandbox_provider, sandbox_id,
	agent_session_id, last_turn_index, last_seq, created_at, updated_at FROM sessions;

CREATE TABLE turns_v2 (
	project_id       TEXT NOT NULL,
	session_id       TEXT NOT NULL,
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
	PRIMARY KEY (project_id, session_id, turn_index),
	FOREIGN KEY (project_id, session_id) REFERENCES sessions_v2 (project_id, id)
) STRICT;
INSERT INTO turns_v2 SELECT s.project_id, t.session_id, t.turn_index, t.turn_id, t.harness,
	t.agent_session_id, t.sandbox_provider, t.sandbox_id, t.status, t.started_at, t.ended_at,
	t.input_tokens, t.output_tokens, t.total_tokens, t.cost, t.stop_reason, t.error, t.owner
FROM turns t JOIN sessions s ON s.id = t.session_id;

CREATE TABLE events_v2 (
	project_id TEXT NOT NULL,
	session_id TEXT NOT NULL,
	seq        INTEGER NOT NULL,
	turn_index INTEGER NOT NULL,
	at         INTEGER NOT NULL,
	event      TEXT NOT NULL,
	PRIMARY KEY (project_id, session_id, seq)
) STRICT;
INSERT INTO events_v2 SELECT COALESCE(s.project_id, ''), e.session_id, e.seq, e.turn_index, e.at, e.event
FROM events e LEFT JOIN sessions s ON s.id = e.session_id;

CREATE TABLE leases_v2 (
	project_id TEXT NOT NULL,
	session_id TEXT NOT NULL,
	owner      TEXT NOT NULL,
	expires_at INTEGER NOT NULL,
	PRIMARY KEY (project_id, session_id)
) STRICT;
INSERT INTO leases_v2 SELECT COALESCE(s.project_id, ''), l.session_id, l.owner, l.expires_at
FROM leases l LEFT JOIN sessions s ON s.id = l.session_id;

DROP TABLE turns;
DROP TABLE events;
DROP TABLE leases;
DROP TABLE sessions;
ALTER TABLE sessions_v2 RENAME TO sessions;
ALTER TABLE turns_v2 RENAME TO turns;
ALTER TABLE events_v2 RENAME TO events;
ALTER TABLE leases_v2 RENAME TO leases;
CREATE INDEX sessions_updated ON sessions (updated_at DESC, id, project_id);
CREATE INDEX turns_running ON turns (owner) WHERE status = 'running';

ALTER TABLE sandboxes ADD COLUMN project_id TEXT NOT NULL DEFAULT '';
UPDATE sandboxes SET project_id = COALESCE((SELECT project_id FROM sessions WHERE id = sandboxes.session_id), '');
ALTER TABLE secrets ADD COLUMN project_id TEXT NOT NULL DEFAULT '';
UPDATE secrets SET project_id = COALESCE((SELECT project_id FROM sessions WHERE id = secrets.session_id), '');
`,
	// 3: a paused turn's resume state (store.Resumes), one row per
	// session, so that an approval answered after a restart resumes it.
	`
CREATE TABLE resumes (
	project_id TEXT NOT NULL,
	session_id TEXT NOT NULL,
	request    BLOB NOT NULL,
	secrets    INTEGER NOT NULL,
	created_at INTEGER NOT NULL,
	PRIMARY KEY (project_id, session_id)
) STRICT;
`,
	// 4: a lease's generation (the fencing token, raised on every change
	// of owner; a lease held now counts as its first), and the replica
	// registry. A released lease keeps its row, with no owner, so that
	// its generation never goes back.
	`
ALTER TABLE leases ADD COLUMN generation INTEGER NOT NULL DEFAULT 1;

CREATE TABLE replicas (
	id            TEXT PRIMARY KEY,
	advertise_url TEXT NOT NULL,
	started_at    INTEGER NOT NULL,
	heartbeat_at  INTEGER NOT NULL,
	draining      INTEGER NOT NULL
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
		if _, err := tx.ExecContext(ctx, `INSERT INTO schema_migrations (version, applied_at) VALUES (?, ?)`, v+1, sqlstore.NowMS()); err != nil {
			return fmt.Errorf("migrate to version %d: %w", v+1, err)
		}
	}
	if err := tx.Commit(); err != nil {
		return fmt.Errorf("migrate: %w", err)
	}
	return nil
}
