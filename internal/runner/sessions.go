package runner

import (
	"context"
	"errors"
	"fmt"
	"strconv"
	"strings"
	"time"

	"github.com/agentrunner/runner/internal/errdefs"
	"github.com/agentrunner/runner/internal/pool"
	"github.com/agentrunner/runner/internal/sandbox"
	"github.com/agentrunner/runner/internal/store"
	"github.com/agentrunner/runner/internal/wire"
)

// SessionView is a session as the /v1 API shows it.
type SessionView struct {
	ID        string `json:"id"`
	ProjectID string `json:"projectId,omitempty"`
	Harness   string `json:"harness,omitempty"`
	Status    string `json:"status"`
	Running   bool   `json:"running"`
	Warm      bool   `json:"warm"`
	// Paused: the warm harness waits for an approval (its interactions
	// are listed by GET /v1/sessions/{id}).
	Paused          bool       `json:"paused"`
	SandboxProvider string     `json:"sandboxProvider,omitempty"`
	SandboxID       string     `json:"sandboxId,omitempty"`
	AgentSessionID  string     `json:"agentSessionId,omitempty"`
	LastTurnIndex   int        `json:"lastTurnIndex"`
	LastSeq         int64      `json:"lastSeq"`
	CreatedAt       time.Time  `json:"createdAt"`
	UpdatedAt       time.Time  `json:"updatedAt"`
	Turns           []TurnView `json:"turns,omitempty"`
	Interactions    []gate     `json:"pendingInteractions"`
}

// TurnView is one ledger row.
type TurnView struct {
	Index      int        `json:"index"`
	TurnID     string     `json:"turnId"`
	Harness    string     `json:"harness"`
	Status     string     `json:"status"`
	StopReason string     `json:"stopReason,omitempty"`
	Error      string     `json:"error,omitempty"`
	SandboxID  string     `json:"sandboxId,omitempty"`
	StartedAt  time.Time  `json:"startedAt"`
	EndedAt    *time.Time `json:"endedAt,omitempty"`
	Usage      wire.Usage `json:"usage"`
}

func (s *Service) view(sess store.Session) SessionView {
	v := SessionView{ID: sess.ID, ProjectID: sess.ProjectID, Harness: sess.Harness, Status: string(sess.Status),
		SandboxProvider: sess.SandboxProvider, SandboxID: sess.SandboxID, AgentSessionID: sess.AgentSessionID,
		LastTurnIndex: sess.LastTurnIndex, LastSeq: sess.LastSeq, CreatedAt: sess.CreatedAt, UpdatedAt: sess.UpdatedAt,
		Interactions: []gate{}}
	key := sess.Key()
	s.mu.Lock()
	_, v.Running = s.busy[key]
	s.mu.Unlock()
	v.Warm = s.warmKey(key)
	for _, p := range s.pools {
		v.Paused = v.Paused || p.Awaiting(poolKey(key))
	}
	return v
}

// ListSessions lists sessions, most recently updated first.
func (s *Service) ListSessions(ctx context.Context, projectID string, limit int) ([]SessionView, error) {
	list, err := s.store.ListSessions(ctx, store.SessionQuery{ProjectID: projectID, Status: store.SessionActive, Limit: limit})
	if err != nil {
		return nil, err
	}
	out := make([]SessionView, 0, len(list))
	for _, sess := range list {
		out = append(out, s.view(sess))
	}
	return out, nil
}

// LocateSession is the session id names for a caller that named no
// project (the operator): the one project holding the id. An id no
// project holds is ErrNotFound; one several hold is ErrConflict, naming
// them, for the caller to choose.
func (s *Service) LocateSession(ctx context.Context, id string) (store.SessionKey, error) {
	list, err := s.store.ListSessions(ctx, store.SessionQuery{ID: id, Limit: 10})
	switch {
	case err != nil:
		return store.SessionKey{}, err
	case len(list) == 0:
		return store.SessionKey{}, errdefs.With(errdefs.ErrNotFound, fmt.Errorf("session %s: not found in any project", id))
	case len(list) > 1:
		projects := make([]string, len(list))
		for i, sess := range list {
			projects[i] = strconv.Quote(sess.ProjectID)
		}
		return store.SessionKey{}, errdefs.With(errdefs.ErrConflict, fmt.Errorf("session id %s is in several projects (%s); name one with ?projectId= or the X-Agenta-Project-Id header", id, strings.Join(projects, ", ")))
	}
	return list[0].Key(), nil
}

// GetSession returns a session with its turns.
func (s *Service) GetSession(ctx context.Context, k store.SessionKey) (SessionView, error) {
	sess, err := s.store.GetSession(ctx, k)
	if err != nil {
		return SessionView{}, fmt.Errorf("session %s: %w", k, err)
	}
	v := s.view(sess)
	turns, err := s.store.ListTurns(ctx, k)
	if err != nil {
		return SessionView{}, err
	}
	pending, _, err := s.interactions(ctx, k)
	if err != nil {
		return SessionView{}, err
	}
	if len(pending) > 0 {
		v.Interactions = pending
	}
	for _, t := range turns {
		tv := TurnView{Index: t.Index, TurnID: t.TurnID, Harness: t.Harness, Status: string(t.Status), StopReason: t.StopReason,
			Error: t.Error, SandboxID: t.SandboxID, StartedAt: t.StartedAt, Usage: t.Usage}
		if !t.EndedAt.IsZero() {
			e := t.EndedAt
			tv.EndedAt = &e
		}
		v.Turns = append(v.Turns, tv)
	}
	return v, nil
}

// Events sends the session's logged events after seq to fn, in order.
// With follow it then stays and sends live events until ctx ends or, when
// the session is idle, returns after the backlog.
func (s *Service) Events(ctx context.Context, k store.SessionKey, after int64, follow bool, fn func(wire.Record) error) error {
	if _, err := s.store.GetSession(ctx, k); err != nil {
		return fmt.Errorf("session %s: %w", k, err)
	}
	var live chan wire.Record
	var unsaved []wire.Record
	if follow {
		// Subscribe before reading the backlog, so nothing falls between:
		// what was published before and is not committed yet comes with
		// the subscription.
		h := s.hubs.Acquire(k)
		defer h.Release()
		live, unsaved = h.Subscribe()
		defer h.Unsubscribe(live)
	}
	const page = 1000
	last := after
	for {
		evs, err := s.store.ReadEvents(ctx, k, last, page)
		if err != nil {
			return err
		}
		for _, e := range evs {
			ev := e.Event
			if err := fn(wire.Record{Kind: wire.RecordEvent, Seq: e.Seq, Event: &ev}); err != nil {
				return err
			}
			last = e.Seq
		}
		if len(evs) < page {
			break
		}
	}
	if !follow {
		return nil
	}
	for _, rec := range unsaved {
		if rec.Seq <= last {
			continue
		}
		if err := fn(rec); err != nil {
			return err
		}
		last = rec.Seq
	}
	for {
		select {
		case <-ctx.Done():
			return nil
		case rec, ok := <-live:
			if !ok {
				return errdefs.With(errdefs.ErrExhausted, errors.New("follower fell behind; reconnect with after=<last seq>"))
			}
			if rec.Seq <= last {
				continue
			}
			if err := fn(rec); err != nil {
				return err
			}
			last = rec.Seq
		}
	}
}

// DeleteSession ends the session: its running turn is cancelled, its warm
// harness and sandbox released, its durable state removed. Its ledger and
// log stay readable, marked deleted.
func (s *Service) DeleteSession(ctx context.Context, key store.SessionKey) error {
	sess, err := s.store.GetSession(ctx, key)
	if err != nil {
		return fmt.Errorf("session %s: %w", key, err)
	}
	s.stopSession(ctx, key, errDeleted)
	s.evict(key, pool.ReasonDeleted)
	for _, p := range s.providers {
		if r, ok := p.(sandbox.StateRemover); ok {
			if err := r.RemoveState(ctx, poolKey(key)); err != nil {
				return fmt.Errorf("remove state of session %s: %w", key, err)
			}
		}
	}
	if err := s.removeWorkspace(ctx, sess); err != nil { // durable.go
		return fmt.Errorf("remove the durable workspace of session %s: %w", key, err)
	}
	s.mu.Lock()
	delete(s.paused, key)
	s.mu.Unlock()
	if rs, ok := s.store.(store.Resumes); ok {
		if err := rs.DeleteResume(ctx, key); err != nil {
			return err
		}
	}
	sess.Status = store.SessionDeleted
	sess.SandboxID, sess.SandboxProvider = "", ""
	if _, err := s.store.PutSession(ctx, sess); err != nil {
		return err
	}
	s.releaseLease(key)
	return nil
}
