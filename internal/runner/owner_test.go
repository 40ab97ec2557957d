package runner_test

import (
	"context"
	"errors"
	"path/filepath"
	"strings"
	"sync"
	"testing"

	"github.com/agentrunner/runner/internal/errdefs"
	"github.com/agentrunner/runner/internal/platform"
	"github.com/agentrunner/runner/internal/runner"
	"github.com/agentrunner/runner/internal/sandbox"
	"github.com/agentrunner/runner/internal/sandbox/local"
	"github.com/agentrunner/runner/internal/wire"
)

// ownerPlatform is an OwnerClaimer whose answer the test sets.
type ownerPlatform struct {
	mu     sync.Mutex
	owner  string
	claims []string // sessions claimed
}

func (o *ownerPlatform) Begin(context.Context, platform.TurnBegin) platform.TurnObserver { return nil }

func (o *ownerPlatform) ClaimOwner(_ context.Context, req *wire.Request) string {
	o.mu.Lock()
	defer o.mu.Unlock()
	o.claims = append(o.claims, req.SessionID)
	return o.owner
}

func (o *ownerPlatform) set(owner string) int {
	o.mu.Lock()
	defer o.mu.Unlock()
	o.owner = owner
	return len(o.claims)
}

// TestOwnerClaim: on a replica-local store (SQLite) with the local
// provider, a cold turn asks the platform who owns the session and is
// refused (ErrConflict, before anything is written) when another replica
// does; a warm turn does not ask.
func TestOwnerClaim(t *testing.T) {
	o := &ownerPlatform{}
	e := newEnv(t, func(c *runner.Config) { c.Observers = []platform.Observer{o} })
	if r := collect(t, e.svc, req{session: "s1", messages: []string{"say one"}}.wire()); !r.res.OK {
		t.Fatal(r.res.Error)
	}
	if n := o.set("replica-b"); n != 1 {
		t.Fatalf("cold turn: %d claims, want 1", n)
	}
	if r := collect(t, e.svc, req{session: "s1", messages: []string{"say one", "one", "say two"}}.wire()); !r.res.OK || r.mode != "warm" {
		t.Fatalf("warm turn: ok %v mode %q error %q", r.res.OK, r.mode, r.res.Error)
	}
	if n := o.set("replica-b"); n != 1 {
		t.Errorf("the warm turn claimed the session (%d claims)", n)
	}
	_, err := e.svc.Run(t.Context(), req{session: "s2", messages: []string{"say three"}}.wire(), nil)
	if !errors.Is(err, errdefs.ErrConflict) || !strings.Contains(err.Error(), "replica replica-b") {
		t.Fatalf("cold turn of a session replica-b owns: %v", err)
	}
	if turns, err := e.st.ListTurns(t.Context(), sk("s2")); err == nil && len(turns) > 0 {
		t.Errorf("the refused turn is in the ledger: %+v", turns)
	}
	o.set("replica-a") // newEnv's replica
	if r := collect(t, e.svc, req{session: "s2", messages: []string{"say three"}}.wire()); !r.res.OK {
		t.Errorf("cold turn of a session this replica owns: %s", r.res.Error)
	}
}

// hostless hides the local provider's Binder: a provider whose sandboxes
// are not on this host, as Daytona's.
type hostless struct{ sandbox.Provider }

// TestOwnerClaimOnlyForHostSandboxes: a provider whose sandboxes any
// replica can reach never asks.
func TestOwnerClaimOnlyForHostSandboxes(t *testing.T) {
	p, err := local.New(local.Config{Dir: filepath.Join(t.TempDir(), "sandboxes"), Isolation: "none"})
	if err != nil {
		t.Fatal(err)
	}
	o := &ownerPlatform{owner: "replica-b"}
	e := newEnvWith(t, []sandbox.Provider{hostless{p}}, func(c *runner.Config) { c.Observers = []platform.Observer{o} })
	if r := collect(t, e.svc, req{session: "s1", messages: []string{"say one"}}.wire()); !r.res.OK {
		t.Fatal(r.res.Error)
	}
	if n := o.set(""); n != 0 {
		t.Errorf("%d claims for a sandbox off this host", n)
	}
}
