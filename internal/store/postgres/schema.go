package postgres

import (
	"context"
	"fmt"

	"github.com/jackc/pgx/v5/pgxpool"

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
	last_seq         BIGINT NOT NULL DEFAULT 0,
	created_at       BIGINT NOT NULL,
	updated_at       BIGINT NOT NULL
);
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
	started_at       BIGINT NOT NULL,
	ended_at         BIGINT NOT NULL,
	input_tokens     BIGINT NOT NULL,
	output_tokens    BIGINT NOT NULL,
	total_tokens     BIGINT NOT NULL,
	cost             DOUBLE PRECISION NOT NULL,
	stop_reason      TEXT NOT NULL,
	error            TEXT NOT NULL,
	owner            TEXT NOT NULL,
	PRIMARY KEY (session_id, turn_index)
);
CREATE INDEX turns_running ON turns (owner) WHERE status = 'running';

-- The session's last_seq numbers the events; AppendEvents bumps it in the
-- statement that inserts them. json, not jsonb: events read back byte for
-- byte as written.
CREATE TABLE events (
	session_id TEXT NOT NULL,
	seq        BIGINT NOT NULL,
	turn_index INTEGER NOT NULL,
	at         BIGINT NOT NULL,
	event      JSON NOT NULL,
	PRIMARY KEY (session_id, seq)
);

CREATE TABLE sandboxes (
	provider   TEXT NOT NULL,
	id         TEXT NOT NULL,
	session_id TEXT NOT NULL,
	state      TEXT NOT NULL,
	labels     JSONB NOT NULL,
	created_at BIGINT NOT NULL,
	updated_at BIGINT NOT NULL,
	PRIMARY KEY (provider, id)
);

CREATE TABLE secrets (
	provider   TEXT NOT NULL,
	id         TEXT NOT NULL,
	name       TEXT NOT NULL,
	session_id TEXT NOT NULL,
	created_at BIGINT NOT NULL,
	PRIMARY KEY (provider, id)
);

CREATE TABLE leases (
	session_id TEXT PRIMARY KEY,
	owner      TEXT NOT NULL,
	expires_at BIGINT NOT NULL
);
`,
	// 2: sessions are keyed by (project, id): the same id in two projects
	// is two sessions. Every row keeps the project its session was
	// recorded with (a session row's project_id); a lease, sandbox or
	// secret whose session has no row gets the empty project, that of
	// requests naming none.
	`
ALTER TABLE turns DROP CONSTRAINT turns_session_id_fkey;
ALTER TABLE turns ADD COLUMN project_id TEXT NOT NULL DEFAULT '';
UPDATE turns t SET project_id = s.project_id FROM sessions s WHERE s.id = t.session_id;
ALTER TABLE events ADD COLUMN project_id TEXT NOT NULL DEFAULT '';
UPDATE events e SET project_id = s.project_id FROM sessions s WHERE s.id = e.session_id;
ALTER TABLE leases ADD COLUMN project_id TEXT NOT NULL DEFAULT '';
UPDATE leases l SET project_id = s.project_id FROM sessions s WHERE s.id = l.session_id;
ALTER TABLE sandboxes ADD COLUMN project_id TEXT NOT NULL DEFAULT '';
UPDATE sandboxes b SET project_id = s.project_id FROM sessions s WHERE s.id = b.session_id;
ALTER TABLE secrets ADD COLUMN project_id TEXT NOT NULL DEFAULT '';
UPDATE secrets c SET project_id = s.project_id FROM sessions s WHERE s.id = c.session_id;

ALTER TABLE sessions DROP CONSTRAINT sessions_pkey;
ALTER TABLE sessions ADD PRIMARY KEY (project_id, id);
ALTER TABLE turns DROP CONSTRAINT turns_pkey;
ALTER TABLE turns ADD PRIMARY KEY (project_id, session_id, turn_index);
ALTER TABLE turns ADD FOREIGN KEY (project_id, session_id) REFERENCES sessions (project_id, id);
ALTER TABLE events DROP CONSTRAINT events_pkey;
ALTER TABLE events ADD PRIMARY KEY (project_id, session_id, seq);
ALTER TABLE leases DROP CONSTRAINT leases_pkey;
ALTER TABLE leases ADD PRIMARY KEY (project_id, session_id);
DROP INDEX sessions_updated;
CREATE INDEX sessions_updated ON sessions (updated_at DESC, id, project_id);
`,
	// 3: a paused turn's resume state (store.Resumes), one row per
	// session, so that an approval answered after a restart resumes it.
	`
CREATE TABLE resumes (
	project_id TEXT NOT NULL,
	session_id TEXT NOT NULL,
	request    BYTEA NOT NULL,
	secrets    BOOLEAN NOT NULL,
	created_at BIGINT NOT NULL,
	PRIMARY KEY (project_id, session_id)
);
`,
	// 4: a lease's generation (the fencing token, raised on every change
	// of owner; a lease held now counts as its first), and the replica
	// registry. A released lease keeps its row, with no owner, so that
	// its generation never goes back.
	`
ALTER TABLE leases ADD COLUMN generation BIGINT NOT NULL DEFAULT 1;

CREATE TABLE replicas (
	id            TEXT PRIMARY KEY,
	advertise_url TEXT NOT NULL,
	started_at    BIGINT NOT NULL,
	heartbeat_at  BIGINT NOT NULL,
	draining      BOOLEAN NOT NULL
);
`,
}

// migrate brings the database to len(migs), in one transaction, holding
// an advisory lock on the schema so that replicas starting together take
// turns. It refuses a database newer than migs, written by a later runner.
func migrate(ctx context.Context, pool *pgxpool.Pool, migs []string) error {
	tx, err := pool.Begin(ctx)
	if err != nil {
		return fmt.Errorf("migrate: %w", err)
	}
	defer tx.Rollback(ctx)
	// Migrations are not store calls: the statement timeout (a second,
	// say) bounds a turn's writes, and the schema's DDL on a busy server
	// takes longer. The caller's context bounds them instead.
	if _, err := tx.Exec(ctx, `SET LOCAL statement_timeout = 0`); err != nil {
		return fmt.Errorf("migrate: %w", err)
	}
	if _, err := tx.Exec(ctx, `SELECT pg_advisory_xact_lock(8765, hashtext(coalesce(current_schema(), '')))`); err != nil {
		return fmt.Errorf("migrate: %w", err)
	}
	if _, err := tx.Exec(ctx, `CREATE TABLE IF NOT EXISTS schema_migrations (
	version    INTEGER PRIMARY KEY,
	applied_at BIGINT NOT NULL
)`); err != nil {
		return fmt.Errorf("migrate: %w", err)
	}
	var v int
	if err := tx.QueryRow(ctx, `SELECT COALESCE(MAX(version), 0) FROM schema_migrations`).Scan(&v); err != nil {
		return fmt.Errorf("migrate: %w", err)
	}
	if v > len(migs) {
		return fmt.Errorf("schema version %d is newer than this runner's %d; upgrade the runner", v, len(migs))
	}
	for ; v < len(migs); v++ {
		if _, err := tx.Exec(ctx, migs[v]); err != nil {
			return fmt.Errorf("migrate to version %d: %w", v+1, err)
		}
		if _, err := tx.Exec(ctx, `INSERT INTO schema_migrations (version, applied_at) VALUES ($1, $2)`, v+1, sqlstore.NowMS()); err != nil {
			return fmt.Errorf("migrate to version %d: %w", v+1, err)
		}
	}
	if err := tx.Commit(ctx); err != nil {
		return fmt.Errorf("migrate: %w", err)
	}
	return nil
}
