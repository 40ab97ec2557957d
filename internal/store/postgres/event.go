package postgres

import (
	"context"
	"encoding/json"
	"fmt"

	"github.com/agentrunner/runner/internal/store"
	"github.com/agentrunner/runner/internal/store/sqlstore"
)

// AppendEvents implements store.Events. One statement bumps the session's
// last_seq (locking its row until commit, which orders concurrent
// appenders) and inserts the events numbered from it, so the numbers are
// gapless.
func (s *Store) AppendEvents(ctx context.Context, k store.SessionKey, evs []store.Event) (int64, error) {
	return s.AppendFencedEvents(ctx, k, 0, evs)
}

// AppendFencedEvents implements store.Events, in the one statement of
// AppendEvents (sqlAppendEvents).
func (s *Store) AppendFencedEvents(ctx context.Context, k store.SessionKey, gen int64, evs []store.Event) (int64, error) {
	args, err := appendArgs(k, gen, evs)
	if err != nil {
		return 0, err
	}
	var last int64
	err = s.db.QueryRow(ctx, sqlAppendEvents, args...).Scan(&last)
	if err != nil {
		return 0, fmt.Errorf("append events %s: %w", k, s.fencedOr(ctx, k, gen, err))
	}
	return last, nil
}

// sqlAppendEvents bumps the session's last_seq and inserts the events
// numbered from it; no row when the session does not exist or the write
// is fenced ($6, fenceCTE).
var sqlAppendEvents = `
WITH ` + fenceCTE("$1", "$5") + `, s AS (
	UPDATE sessions SET last_seq = last_seq + cardinality($2::int[])
	WHERE project_id = $5 AND id = $1 AND NOT EXISTS (SELECT FROM fence WHERE generation > $6)
	RETURNING last_seq
), ins AS (
	INSERT INTO events (project_id, session_id, seq, turn_index, at, event)
	SELECT $5, $1, s.last_seq - cardinality($2::int[]) + e.n, e.turn_index, e.at, e.event::json
	FROM s, unnest($2::int[], $3::bigint[], $4::text[]) WITH ORDINALITY AS e (turn_index, at, event, n)
)
SELECT last_seq FROM s`

// appendArgs are sqlAppendEvents' arguments for evs written at lease
// generation gen.
func appendArgs(k store.SessionKey, gen int64, evs []store.Event) ([]any, error) {
	turns := make([]int32, len(evs))
	ats := make([]int64, len(evs))
	data := make([]string, len(evs))
	for i, e := range evs {
		b, err := json.Marshal(e.Event)
		if err != nil {
			return nil, fmt.Errorf("append events %s: %w", k, err)
		}
		turns[i], ats[i], data[i] = int32(e.TurnIndex), sqlstore.MS(e.Time), string(b)
	}
	return []any{k.SessionID, turns, ats, data, k.ProjectID, fenceArg(gen)}, nil
}

// ReadEvents implements store.Events.
func (s *Store) ReadEvents(ctx context.Context, k store.SessionKey, after int64, n int) ([]store.Event, error) {
	rows, err := s.db.Query(ctx, `SELECT seq, turn_index, at, event::text FROM events
WHERE project_id = $1 AND session_id = $2 AND seq > $3 ORDER BY seq LIMIT $4`, k.ProjectID, k.SessionID, after, limit(n))
	out, err := collect(rows, err, sqlstore.ScanEvent)
	if err == nil && len(out) == 0 {
		err = s.sessionExists(ctx, k)
	}
	if err != nil {
		return nil, fmt.Errorf("read events %s: %w", k, err)
	}
	return out, nil
}
