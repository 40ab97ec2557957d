package river

import (
	"context"
	"database/sql"
	"encoding/json"
	"errors"
	"fmt"
	"strconv"
	"strings"
	"time"

	"github.com/agentrunner/runner/internal/errdefs"
	"github.com/agentrunner/runner/internal/jobs"
)

// record is one runner_job row: the job as shown, and what running it
// needs (the request without its secrets; the secrets sealed, in their own
// column).
type record struct {
	jobs.Job
	Request json.RawMessage `json:"request"`
	// RiverIDs are the River jobs of the runs not ended yet.
	RiverIDs []int64 `json:"riverIds,omitempty"`
}

// table is runner_job over database/sql, in SQLite's or PostgreSQL's
// dialect. Rows change by compare-and-swap on version, so concurrent
// writers (a worker, a webhook, a cancel, another replica) never lose
// each other's updates.
type table struct {
	db *sql.DB
	pg bool
}

const schema = `CREATE TABLE IF NOT EXISTS runner_job (
	id TEXT PRIMARY KEY,
	project_id TEXT NOT NULL,
	idempotency_key TEXT,
	status TEXT NOT NULL,
	scheduled INTEGER NOT NULL,
	next_run_at BIGINT,
	version BIGINT NOT NULL,
	doc TEXT NOT NULL,
	secrets TEXT NOT NULL,
	created_at BIGINT NOT NULL
);
CREATE UNIQUE INDEX IF NOT EXISTS runner_job_idempotency ON runner_job (project_id, idempotency_key);
CREATE INDEX IF NOT EXISTS runner_job_due ON runner_job (next_run_at);
CREATE INDEX IF NOT EXISTS runner_job_project ON runner_job (project_id, created_at)`

func (t *table) migrate(ctx context.Context) error {
	for _, stmt := range strings.Split(schema, ";\n") {
		if _, err := t.db.ExecContext(ctx, stmt); err != nil {
			return fmt.Errorf("jobs schema: %w", err)
		}
	}
	return nil
}

// q rewrites ? placeholders as $n for PostgreSQL.
func (t *table) q(s string) string {
	if !t.pg {
		return s
	}
	var b strings.Builder
	n := 0
	for _, r := range s {
		if r == '?' {
			n++
			b.WriteString("$" + strconv.Itoa(n))
			continue
		}
		b.WriteRune(r)
	}
	return b.String()
}

func ms(t *time.Time) any {
	if t == nil {
		return nil
	}
	return t.UnixMilli()
}

func nullable(s string) any {
	if s == "" {
		return nil
	}
	return s
}

// insert adds rec; an idempotency key the project already used returns
// that job's record and false.
func (t *table) insert(ctx context.Context, rec *record, secrets string) (record, bool, error) {
	doc, err := json.Marshal(rec)
	if err != nil {
		return record{}, false, err
	}
	_, err = t.db.ExecContext(ctx, t.q(`INSERT INTO runner_job (id, project_id, idempotency_key, status, scheduled, next_run_at, version, doc, secrets, created_at) VALUES (?, ?, ?, ?, ?, ?, 1, ?, ?, ?)`),
		rec.ID, rec.ProjectID, nullable(rec.IdempotencyKey), string(rec.Status), scheduledFlag(rec), ms(rec.NextRunAt), string(doc), secrets, rec.CreatedAt.UnixMilli())
	if err != nil && rec.IdempotencyKey != "" {
		// The key's index refused it: a racing submission won.
		if prev, found, gerr := t.byKey(ctx, rec.ProjectID, rec.IdempotencyKey); gerr == nil && found {
			return prev, false, nil
		}
	}
	if err != nil {
		return record{}, false, fmt.Errorf("jobs: insert %s: %w", rec.ID, errdefs.With(errdefs.ErrUnavailable, err))
	}
	return *rec, true, nil
}

func scheduledFlag(rec *record) int {
	if rec.Schedule != nil {
		return 1
	}
	return 0
}

func (t *table) byKey(ctx context.Context, project, key string) (record, bool, error) {
	rec, _, _, err := t.scan(t.db.QueryRowContext(ctx, t.q(`SELECT doc, secrets, version FROM runner_job WHERE project_id = ? AND idempotency_key = ?`), project, key))
	if errors.Is(err, sql.ErrNoRows) {
		return record{}, false, nil
	}
	return rec, err == nil, err
}

func (t *table) scan(row interface{ Scan(...any) error }) (record, string, int64, error) {
	var doc, secrets string
	var version int64
	if err := row.Scan(&doc, &secrets, &version); err != nil {
		return record{}, "", 0, err
	}
	var rec record
	if err := json.Unmarshal([]byte(doc), &rec); err != nil {
		return record{}, "", 0, fmt.Errorf("jobs: decode row: %w", err)
	}
	return rec, secrets, version, nil
}

// get returns the job, its sealed secrets and its version.
func (t *table) get(ctx context.Context, id string) (record, string, int64, error) {
	rec, secrets, v, err := t.scan(t.db.QueryRowContext(ctx, t.q(`SELECT doc, secrets, version FROM runner_job WHERE id = ?`), id))
	if errors.Is(err, sql.ErrNoRows) {
		return record{}, "", 0, errdefs.With(errdefs.ErrNotFound, fmt.Errorf("job %s: not found", id))
	}
	if err != nil {
		return record{}, "", 0, fmt.Errorf("job %s: %w", id, errdefs.With(errdefs.ErrUnavailable, err))
	}
	return rec, secrets, v, nil
}

// errUnchanged, returned by an update's fn, leaves the row as it is.
var errUnchanged = errors.New("unchanged")

// update applies fn to the stored job until its compare-and-swap wins,
// and returns the record written (or, with errUnchanged, the one read).
func (t *table) update(ctx context.Context, id string, now func() time.Time, fn func(*record) error) (record, error) {
	for range 100 {
		rec, _, v, err := t.get(ctx, id)
		if err != nil {
			return record{}, err
		}
		if err := fn(&rec); errors.Is(err, errUnchanged) {
			return rec, nil
		} else if err != nil {
			return rec, err
		}
		rec.UpdatedAt = now().UTC()
		doc, err := json.Marshal(&rec)
		if err != nil {
			return record{}, err
		}
		res, err := t.db.ExecContext(ctx, t.q(`UPDATE runner_job SET doc = ?, status = ?, next_run_at = ?, version = version + 1 WHERE id = ? AND version = ?`),
			string(doc), string(rec.Status), ms(rec.NextRunAt), id, v)
		if err != nil {
			return record{}, fmt.Errorf("job %s: update: %w", id, errdefs.With(errdefs.ErrUnavailable, err))
		}
		if n, _ := res.RowsAffected(); n == 1 {
			return rec, nil
		}
	}
	return record{}, errdefs.With(errdefs.ErrConflict, fmt.Errorf("job %s: too many concurrent updates", id))
}

func (t *table) list(ctx context.Context, f jobs.Filter) ([]record, error) {
	where, args := []string{"1 = 1"}, []any{}
	if !f.Any {
		where, args = append(where, "project_id = ?"), append(args, f.Project)
	}
	if f.Status != "" {
		where, args = append(where, "status = ?"), append(args, string(f.Status))
	}
	switch f.Scheduled {
	case "yes":
		where = append(where, "scheduled = 1")
	case "no":
		where = append(where, "scheduled = 0")
	}
	limit := f.Limit
	if limit <= 0 {
		limit = 100
	}
	rows, err := t.db.QueryContext(ctx, t.q(`SELECT doc, secrets, version FROM runner_job WHERE `+strings.Join(where, " AND ")+` ORDER BY created_at DESC, id DESC LIMIT `+strconv.Itoa(limit)), args...)
	if err != nil {
		return nil, fmt.Errorf("jobs: list: %w", errdefs.With(errdefs.ErrUnavailable, err))
	}
	defer rows.Close()
	var out []record
	for rows.Next() {
		rec, _, _, err := t.scan(rows)
		if err != nil {
			return nil, err
		}
		out = append(out, rec)
	}
	return out, rows.Err()
}

// due lists the schedules whose next tick is at or before now.
func (t *table) due(ctx context.Context, now time.Time) ([]string, error) {
	rows, err := t.db.QueryContext(ctx, t.q(`SELECT id FROM runner_job WHERE scheduled = 1 AND status <> ? AND next_run_at IS NOT NULL AND next_run_at <= ? ORDER BY next_run_at LIMIT 1000`),
		string(jobs.Cancelled), now.UnixMilli())
	if err != nil {
		return nil, fmt.Errorf("jobs: due schedules: %w", err)
	}
	defer rows.Close()
	var ids []string
	for rows.Next() {
		var id string
		if err := rows.Scan(&id); err != nil {
			return nil, err
		}
		ids = append(ids, id)
	}
	return ids, rows.Err()
}
