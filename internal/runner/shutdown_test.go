package runner_test

import (
	"context"
	"sync"
	"testing"
	"time"

	"github.com/agentrunner/runner/internal/runner"
	"github.com/agentrunner/runner/internal/sandbox"
	"github.com/agentrunner/runner/internal/sandbox/local"
	"github.com/agentrunner/runner/internal/store"
	"github.com/agentrunner/runner/internal/store/sqlite"
)

// teardownStore is a store whose teardown writes can be held until their
// context ends, and which records what happens under them.
type teardownStore struct {
	store.Store

	mu        sync.Mutex
	hold      bool // PutSandbox waits for its context to end
	writing   int  // PutSandbox calls in progress
	closed    bool
	closedMid bool            // Close ran while one was in progress, or before one
	deadlines []time.Duration // how long each teardown write was given
}

func (s *teardownStore) given(ctx context.Context) {
	if d, ok := ctx.Deadline(); ok {
		s.mu.Lock()
		s.deadlines = append(s.deadlines, time.Until(d))
		s.mu.Unlock()
	}
}

func (s *teardownStore) PutSandbox(ctx context.Context, sb store.Sandbox) (store.Sandbox, error) {
	s.given(ctx)
	s.mu.Lock()
	hold := s.hold
	s.writing++
	s.closedMid = s.closedMid || s.closed
	s.mu.Unlock()
	defer func() {
		s.mu.Lock()
		s.writing--
		s.mu.Unlock()
	}()
	if hold {
		<-ctx.Done()
		return store.Sandbox{}, ctx.Err()
	}
	return s.Store.PutSandbox(ctx, sb)
}

func (s *teardownStore) ReleaseLease(ctx context.Context, k store.SessionKey, owner string) error {
	s.given(ctx)
	return s.Store.ReleaseLease(ctx, k, owner)
}

func (s *teardownStore) Close() error {
	s.mu.Lock()
	s.closedMid = s.closedMid || s.writing > 0
	s.closed = true
	s.mu.Unlock()
	return s.Store.Close()
}

func newTeardownEnv(t *testing.T, teardown time.Duration) (*env, *teardownStore) {
	t.Helper()
	p, err := local.New(local.Config{Dir: t.TempDir(), Isolation: "none"})
	if err != nil {
		t.Fatal(err)
	}
	db, err := sqlite.Open(t.Context(), t.TempDir()+"/runner.db")
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { db.Close() }) // after the service's Shutdown, registered below
	st := &teardownStore{Store: db}
	e := newEnvWithStore(t, []sandbox.Provider{p}, st, func(c *runner.Config) { c.TeardownTimeout = teardown })
	return e, st
}

// Shutdown returns only once the warm sessions' teardowns are done, even
// when its deadline passed first: the caller closes the store next, and a
// teardown still writing to it would write to a closed store.
func TestShutdownWaitsForTheWarmTeardowns(t *testing.T) {
	e, st := newTeardownEnv(t, 200*time.Millisecond)
	e.turn(t, req{session: "s", messages: []string{"say hi"}})
	if e.svc.Warm() != 1 {
		t.Fatalf("%d warm sessions, want 1", e.svc.Warm())
	}
	st.mu.Lock()
	st.hold = true
	st.mu.Unlock()
	ctx, cancel := context.WithCancel(t.Context())
	cancel() // the shutdown deadline has passed
	_ = e.svc.Shutdown(ctx)
	if err := st.Close(); err != nil {
		t.Fatal(err)
	}
	_ = e.svc.Shutdown(context.Background()) // waits out whatever teardown is left
	st.mu.Lock()
	defer st.mu.Unlock()
	if st.closedMid {
		t.Fatal("the store was closed before or while a warm session's teardown wrote to it")
	}
}

// The teardown's store writes (the lease, the sandbox record) get the
// configured teardown timeout, not a hard-coded 10 s.
func TestTeardownWritesGetTheTeardownTimeout(t *testing.T) {
	const teardown = time.Hour
	e, st := newTeardownEnv(t, teardown)
	e.turn(t, req{session: "s", messages: []string{"say hi"}})
	if err := e.svc.DeleteSession(t.Context(), sk("s")); err != nil {
		t.Fatal(err)
	}
	st.mu.Lock()
	defer st.mu.Unlock()
	if len(st.deadlines) == 0 {
		t.Fatal("no teardown write seen")
	}
	for _, d := range st.deadlines {
		if d < teardown/2 {
			t.Errorf("a teardown write was given %v, want the teardown timeout %v", d.Round(time.Second), teardown)
		}
	}
}
