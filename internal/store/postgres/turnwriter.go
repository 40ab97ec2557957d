package postgres

import (
	"context"
	"errors"
	"fmt"

	"github.com/jackc/pgx/v5"

	"github.com/agentrunner/runner/internal/errdefs"
	"github.com/agentrunner/runner/internal/store"
	"github.com/agentrunner/runner/internal/store/sqlstore"
)

var _ store.TurnWriter = (*Store)(nil)

// BeginTurnWithEvents implements store.TurnWriter: the begin and the
// append in one batch, one round trip, one transaction.
func (s *Store) BeginTurnWithEvents(ctx context.Context, t store.Turn, evs []store.Event) (int64, error) {
	if err := t.ValidateBegin(); err != nil {
		return 0, err
	}
	args, err := appendArgs(t.Key(), t.Generation, evs)
	if err != nil {
		return 0, err
	}
	var b pgx.Batch
	b.Queue(sqlBeginTurn, beginArgs(t)...)
	b.Queue(sqlAppendEvents, args...)
	var last int64
	err = s.db.sendBatch(ctx, &b, func(br pgx.BatchResults) error {
		if err := readBegin(br); err != nil {
			return err
		}
		return br.QueryRow().Scan(&last)
	})
	if err != nil {
		return 0, fmt.Errorf("begin turn %s/%d: %w", t.Key(), t.Index, s.fencedOr(ctx, t.Key(), t.Generation, err))
	}
	return last, nil
}

// EndTurnWithEvents implements store.TurnWriter: the append, the outcome
// and, to tell why an outcome is refused, the turn's status, in one
// batch.
func (s *Store) EndTurnWithEvents(ctx context.Context, t store.Turn, evs []store.Event) (store.Turn, int64, error) {
	if err := t.ValidateEnd(); err != nil {
		return store.Turn{}, 0, err
	}
	args, err := appendArgs(t.Key(), t.Generation, evs)
	if err != nil {
		return store.Turn{}, 0, err
	}
	var b pgx.Batch
	b.Queue(sqlAppendEvents, args...)
	queueEnd(&b, t)
	var last int64
	var out store.Turn
	var endErr error
	err = s.db.sendBatch(ctx, &b, func(br pgx.BatchResults) error {
		if err := br.QueryRow().Scan(&last); err != nil {
			return err // no session, or fenced: nothing was written
		}
		out, endErr = readEnd(br, t)
		if refusedEnd(endErr) {
			return nil // the events stand
		}
		return endErr
	})
	if err != nil {
		return store.Turn{}, 0, fmt.Errorf("end turn %s/%d: %w", t.Key(), t.Index, s.fencedOr(ctx, t.Key(), t.Generation, err))
	}
	if endErr != nil {
		return store.Turn{}, last, fmt.Errorf("end turn %s/%d: %w", t.Key(), t.Index, endErr)
	}
	return out, last, nil
}

// WriteTurnWithEvents implements store.TurnWriter: begin, append and
// outcome in one batch, one round trip, one transaction.
func (s *Store) WriteTurnWithEvents(ctx context.Context, begin store.Turn, evs []store.Event, end store.Turn) (store.Turn, int64, error) {
	if err := begin.ValidateBegin(); err != nil {
		return store.Turn{}, 0, err
	}
	if err := end.ValidateEnd(); err != nil {
		return store.Turn{}, 0, err
	}
	args, err := appendArgs(begin.Key(), begin.Generation, evs)
	if err != nil {
		return store.Turn{}, 0, err
	}
	var b pgx.Batch
	b.Queue(sqlBeginTurn, beginArgs(begin)...)
	b.Queue(sqlAppendEvents, args...)
	queueEnd(&b, end)
	var last int64
	var out store.Turn
	var endErr error
	err = s.db.sendBatch(ctx, &b, func(br pgx.BatchResults) error {
		if err := readBegin(br); err != nil {
			return err
		}
		if err := br.QueryRow().Scan(&last); err != nil {
			return err
		}
		out, endErr = readEnd(br, end)
		if refusedEnd(endErr) {
			return nil // the begin and the events stand
		}
		return endErr
	})
	if err != nil {
		// Nothing of it was written: the batch is one transaction.
		return store.Turn{}, 0, fmt.Errorf("begin turn %s/%d: %w: %w", begin.Key(), begin.Index, store.ErrNotBegun, s.fencedOr(ctx, begin.Key(), begin.Generation, err))
	}
	if endErr != nil {
		return store.Turn{}, last, fmt.Errorf("end turn %s/%d: %w", end.Key(), end.Index, endErr)
	}
	return out, last, nil
}

// readBegin reads sqlBeginTurn's result: ErrConflict for a taken index,
// pgx.ErrNoRows for a missing session (whose other statements then write
// nothing either).
func readBegin(br pgx.BatchResults) error {
	_, err := sqlstore.ScanTurn(br.QueryRow())
	if isUnique(err) {
		return errdefs.ErrConflict
	}
	return err
}

// queueEnd queues the outcome t and, to tell why it may be refused,
// sqlEndRefused after it.
func queueEnd(b *pgx.Batch, t store.Turn) {
	b.Queue(sqlEndTurn, endArgs(t)...)
	b.Queue(sqlEndRefused, t.ProjectID, t.SessionID, t.Index)
}

// readEnd reads queueEnd's results: the ended turn t, or why it was
// refused (ErrConflict: already ended; ErrNotFound: no such turn; a
// *store.FencedError).
func readEnd(br pgx.BatchResults, t store.Turn) (store.Turn, error) {
	out, err := sqlstore.ScanTurn(br.QueryRow())
	refusal := endRefused(br.QueryRow(), t)
	switch {
	case err == nil:
		return out, nil
	case !errors.Is(err, pgx.ErrNoRows):
		return store.Turn{}, err
	}
	return store.Turn{}, refusal
}

func refusedEnd(err error) bool {
	return errors.Is(err, errdefs.ErrConflict) || errors.Is(err, errdefs.ErrNotFound)
}
