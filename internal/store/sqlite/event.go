package sqlite

import (
	"context"
	"database/sql"
	"encoding/json"
	"errors"
	"fmt"

	"github.com/agentrunner/runner/internal/errdefs"
	"github.com/agentrunner/runner/internal/store"
	"github.com/agentrunner/runner/internal/store/sqlstore"
)

// maxGroup bounds how many AppendEvents calls share one transaction.
const maxGroup = 256

// insertChunk is the most events one INSERT statement carries.
const insertChunk = 8

// appendReq is one AppendEvents call waiting for its commit.
type appendReq struct {
	ctx     context.Context
	session store.SessionKey
	gen     int64 // the writer's lease generation: the fence (0: none)
	evs     []store.Event
	data    []string // evs[i].Event as JSON
	last    int64
	err     error
	done    chan struct{}

	// begin, when set, is the turn begun in the same transaction, first
	// (BeginTurnWithEvents); refused, it fails the request alone.
	begin *store.Turn
	// end, when set, is the outcome recorded in the same transaction
	// (EndTurnWithEvents): ended and endErr are its result.
	end    *store.Turn
	ended  store.Turn
	endErr error
}

// AppendEvents implements store.Events. Calls are committed one group at
// a time (appendAndWait): the calls that arrive while one commits go into
// the next transaction, so concurrent appenders share the cost of a
// commit. The sequence numbers come from the session row, bumped in the
// transaction that inserts the events, so they are gapless.
func (s *Store) AppendEvents(ctx context.Context, k store.SessionKey, evs []store.Event) (int64, error) {
	req, err := newAppendReq(ctx, k, evs)
	if err != nil {
		return 0, err
	}
	return req.last, s.appendAndWait(req)
}

// AppendFencedEvents implements store.Events, queued like AppendEvents.
func (s *Store) AppendFencedEvents(ctx context.Context, k store.SessionKey, gen int64, evs []store.Event) (int64, error) {
	req, err := newAppendReq(ctx, k, evs)
	if err != nil {
		return 0, err
	}
	req.gen = gen
	return req.last, s.appendAndWait(req)
}

// EndTurnWithEvents implements store.TurnWriter: the request is queued
// like AppendEvents, so it shares its commit with the
// appends of other sessions.
func (s *Store) EndTurnWithEvents(ctx context.Context, t store.Turn, evs []store.Event) (store.Turn, int64, error) {
	if err := t.ValidateEnd(); err != nil {
		return store.Turn{}, 0, err
	}
	req, err := newAppendReq(ctx, t.Key(), evs)
	if err != nil {
		return store.Turn{}, 0, err
	}
	req.end, req.gen = &t, t.Generation
	if err := s.appendAndWait(req); err != nil {
		return store.Turn{}, 0, err
	}
	if req.endErr != nil {
		return store.Turn{}, req.last, fmt.Errorf("end turn %s/%d: %w", t.Key(), t.Index, req.endErr)
	}
	return req.ended, req.last, nil
}

// BeginTurnWithEvents implements store.TurnWriter, queued like AppendEvents.
func (s *Store) BeginTurnWithEvents(ctx context.Context, t store.Turn, evs []store.Event) (int64, error) {
	if err := t.ValidateBegin(); err != nil {
		return 0, err
	}
	req, err := newAppendReq(ctx, t.Key(), evs)
	if err != nil {
		return 0, err
	}
	req.begin, req.gen = &t, t.Generation
	if err := s.appendAndWait(req); err != nil {
		return 0, fmt.Errorf("begin turn %s/%d: %w", t.Key(), t.Index, err)
	}
	return req.last, nil
}

// WriteTurnWithEvents implements store.TurnWriter, queued like AppendEvents:
// a short turn costs one commit.
func (s *Store) WriteTurnWithEvents(ctx context.Context, begin store.Turn, evs []store.Event, end store.Turn) (store.Turn, int64, error) {
	if err := begin.ValidateBegin(); err != nil {
		return store.Turn{}, 0, err
	}
	if err := end.ValidateEnd(); err != nil {
		return store.Turn{}, 0, err
	}
	req, err := newAppendReq(ctx, begin.Key(), evs)
	if err != nil {
		return store.Turn{}, 0, err
	}
	req.begin, req.end, req.gen = &begin, &end, max(begin.Generation, end.Generation)
	if err := s.appendAndWait(req); err != nil {
		return store.Turn{}, 0, fmt.Errorf("begin turn %s/%d: %w: %w", begin.Key(), begin.Index, store.ErrNotBegun, err)
	}
	if req.endErr != nil {
		return store.Turn{}, req.last, fmt.Errorf("end turn %s/%d: %w", end.Key(), end.Index, req.endErr)
	}
	return req.ended, req.last, nil
}

func newAppendReq(ctx context.Context, k store.SessionKey, evs []store.Event) (*appendReq, error) {
	req := &appendReq{ctx: ctx, session: k, evs: evs, data: make([]string, len(evs)), done: make(chan struct{})}
	for i := range evs {
		b, err := json.Marshal(evs[i].Event)
		if err != nil {
			return nil, fmt.Errorf("append events %s: %w", k, err)
		}
		req.data[i] = string(b)
	}
	return req, nil
}

// appendAndWait queues req and waits for its commit. Whoever finds no
// commit running commits the queue itself, so an uncontended append
// costs no hand-off to another goroutine; the appends that arrive while
// one commits share the next transaction (group commit). A committer
// stops once its own request is done, leaving what is still queued to a
// goroutine of its own, so nobody commits for others without end.
func (s *Store) appendAndWait(req *appendReq) error {
	ctx, sessionID := req.ctx, req.session
	if err := ctx.Err(); err != nil {
		return fmt.Errorf("append events %s: %w", sessionID, err)
	}
	s.appendMu.Lock()
	if s.appendClosed {
		s.appendMu.Unlock()
		return fmt.Errorf("append events %s: store closed: %w", sessionID, errdefs.ErrUnavailable)
	}
	s.queue = append(s.queue, req)
	commit := !s.committing
	if commit {
		s.committing = true
		s.committers.Add(1)
	}
	s.appendMu.Unlock()
	if commit {
		s.commitQueue(req)
	}
	<-req.done // once queued, a request is committed or failed, whatever ctx does
	if req.err != nil {
		return fmt.Errorf("append events %s: %w", sessionID, req.err)
	}
	return nil
}

// commitQueue commits the queue in groups until own is done (nil: until
// it is empty), then hands what remains to a goroutine of its own. The
// caller holds the committer role (s.committing, one s.committers count).
func (s *Store) commitQueue(own *appendReq) {
	for {
		s.appendMu.Lock()
		if len(s.queue) == 0 {
			s.committing = false
			s.appendMu.Unlock()
			s.committers.Done()
			return
		}
		if own != nil && isDone(own) {
			s.appendMu.Unlock()
			go s.commitQueue(nil) // keeps the role and its count
			return
		}
		n := min(len(s.queue), maxGroup)
		group := make([]*appendReq, n)
		copy(group, s.queue)
		s.queue = append(s.queue[:0], s.queue[n:]...)
		s.appendMu.Unlock()
		s.commitGroup(group)
		for _, req := range group {
			close(req.done)
		}
	}
}

func isDone(req *appendReq) bool {
	select {
	case <-req.done:
		return true
	default:
		return false
	}
}

// commitGroup appends every request of group in one transaction. A request
// for an unknown session or with a cancelled context fails alone; any
// other error fails the whole group.
func (s *Store) commitGroup(group []*appendReq) {
	err := s.inTx(context.Background(), func(tx *sql.Tx) error {
		bump := tx.Stmt(s.bumpSeq)
		var args []any
		for _, req := range group {
			if req.err = req.ctx.Err(); req.err != nil {
				continue
			}
			whole := req.begin != nil && req.end != nil && req.end.Key() == req.begin.Key() && req.end.Index == req.begin.Index
			if req.begin != nil {
				row := *req.begin
				if whole {
					// Begun and ended in one request: the row is written
					// ended, with no update of it.
					row = endedTurn(row, *req.end)
				}
				if req.err = s.beginInGroup(tx, row, req.gen); req.err != nil {
					if errors.Is(req.err, errdefs.ErrNotFound) || errors.Is(req.err, errdefs.ErrConflict) || errors.Is(req.err, errdefs.ErrFenced) {
						continue // refused: nothing of it was written
					}
					return req.err
				}
				if whole {
					req.ended = row
				}
			}
			if req.end != nil && !whole {
				// The outcome first: a missing session fails here alone,
				// and so does a fenced write.
				end := *req.end
				end.Generation = req.gen
				req.ended, req.endErr = s.endTurn(context.Background(), tx, end)
				if errors.Is(req.endErr, errdefs.ErrFenced) {
					req.err, req.endErr = req.endErr, nil // nothing of it is written
					continue
				}
				if req.endErr != nil && !errors.Is(req.endErr, errdefs.ErrConflict) && !errors.Is(req.endErr, errdefs.ErrNotFound) {
					return req.endErr
				}
			}
			// A begin or an outcome passed the fence already: the one
			// writer connection keeps any takeover out until commit.
			var err error
			switch {
			case req.begin != nil:
				err = tx.Stmt(s.stmts.bumpBegin).QueryRow(len(req.evs), req.begin.Index, sqlstore.NowMS(), req.session.ProjectID, req.session.SessionID).Scan(&req.last)
			case req.end != nil:
				err = bump.QueryRow(len(req.evs), req.session.ProjectID, req.session.SessionID, fenceArg(0)).Scan(&req.last)
			default:
				err = bump.QueryRow(len(req.evs), req.session.ProjectID, req.session.SessionID, fenceArg(req.gen)).Scan(&req.last)
			}
			if errors.Is(err, sql.ErrNoRows) {
				req.err = s.refusal(context.Background(), tx, req.session, req.gen, errdefs.ErrNotFound) // nothing was written
				if !errors.Is(req.err, errdefs.ErrNotFound) && !errors.Is(req.err, errdefs.ErrFenced) {
					return req.err
				}
				continue
			}
			if err != nil {
				return err
			}
			seq := req.last - int64(len(req.evs))
			for start := 0; start < len(req.evs); start += insertChunk {
				chunk := req.evs[start:min(start+insertChunk, len(req.evs))]
				args = args[:0]
				for i, e := range chunk {
					seq++
					args = append(args, req.session.ProjectID, req.session.SessionID, seq, e.TurnIndex, sqlstore.MS(e.Time), req.data[start+i])
				}
				if _, err := tx.Stmt(s.insertEvents[len(chunk)-1]).Exec(args...); err != nil {
					return err
				}
			}
		}
		return nil
	})
	if err != nil {
		for _, req := range group {
			req.last, req.err = 0, err
			req.ended, req.endErr = store.Turn{}, nil
		}
	}
}

// beginInGroup begins t inside a group's transaction with one statement,
// the turn's row (running, or already ended: endedTurn): refused (the
// index is taken, or there is no such session, which the row's foreign
// key tells), it writes nothing, and the rest of the group commits. The
// session row's turn index moves with the request's sequence bump
// (bumpBegin).
func (s *Store) beginInGroup(tx *sql.Tx, t store.Turn, gen int64) error {
	status := t.Status
	if status == "" {
		status = store.TurnRunning
	}
	res, err := tx.Stmt(s.stmts.insertTurnRow).Exec(t.ProjectID, t.SessionID, t.Index, t.TurnID, t.Harness, t.AgentSessionID,
		t.SandboxProvider, t.SandboxID, string(status), sqlstore.MS(t.StartedAt), sqlstore.MS(t.EndedAt),
		t.Usage.Input, t.Usage.Output, t.Usage.Total, t.Usage.Cost, t.StopReason, t.Error, t.Owner,
		t.ProjectID, t.SessionID, fenceArg(gen))
	switch {
	case isUnique(err):
		return errdefs.ErrConflict
	case isForeignKey(err):
		return errdefs.ErrNotFound
	case err != nil:
		return err
	}
	if n, err := res.RowsAffected(); err != nil || n > 0 {
		return err
	}
	return s.refusal(context.Background(), tx, t.Key(), gen, errdefs.ErrNotFound)
}

// endedTurn is begin with the outcome end recorded, as endTurn's update
// would leave its row, times at the store's millisecond.
func endedTurn(begin, end store.Turn) store.Turn {
	t := begin
	t.Generation = 0 // a write's condition, not stored
	t.Status, t.EndedAt, t.Usage, t.StopReason, t.Error = end.Status, end.EndedAt, end.Usage, end.StopReason, end.Error
	t.AgentSessionID, t.SandboxProvider, t.SandboxID = end.AgentSessionID, end.SandboxProvider, end.SandboxID
	t.StartedAt, t.EndedAt = sqlstore.FromMS(sqlstore.MS(t.StartedAt)), sqlstore.FromMS(sqlstore.MS(t.EndedAt))
	return t
}

// ReadEvents implements store.Events.
func (s *Store) ReadEvents(ctx context.Context, k store.SessionKey, after int64, limit int) ([]store.Event, error) {
	if limit <= 0 {
		limit = -1
	}
	rows, err := s.r.QueryContext(ctx, `SELECT seq, turn_index, at, event FROM events
WHERE project_id = ? AND session_id = ? AND seq > ? ORDER BY seq LIMIT ?`, k.ProjectID, k.SessionID, after, limit)
	out, err := collect(rows, err, sqlstore.ScanEvent)
	if err == nil && len(out) == 0 {
		err = s.sessionExists(ctx, k)
	}
	if err != nil {
		return nil, fmt.Errorf("read events %s: %w", k, err)
	}
	return out, nil
}
