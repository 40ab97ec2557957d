package runner_test

import (
	"context"
	"errors"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/agentrunner/runner/internal/errdefs"
	"github.com/agentrunner/runner/internal/sandbox"
	"github.com/agentrunner/runner/internal/sandbox/local"
)

// TestRollingRestartOnPostgres: replica A drains for a restart while a
// turn of session s runs on it. A reports not ready and refuses a new
// turn (503 class) at once, the running turn finishes, Shutdown lets the
// session go, and replica B, on the same PostgreSQL, continues the
// session with its history.
func TestRollingRestartOnPostgres(t *testing.T) {
	sa, sb := sharedPostgres(t)
	a, b := replica(t, "replica-a", sa), replica(t, "replica-b", sb)

	if first := collect(t, a, req{session: "s", messages: []string{"say the password is swordfish"}}.wire()); !first.res.OK {
		t.Fatal(first.res.Error)
	}
	gate := filepath.Join(t.TempDir(), "go")
	type outcome struct {
		out string
		err error
	}
	inflight := make(chan outcome, 1)
	go func() {
		w := req{session: "s", messages: []string{"say the password is swordfish", "ok", "exec while [ ! -e " + gate + " ]; do sleep 0.02; done; echo released\nsay done"}}.wire()
		res, err := a.Run(context.Background(), w, nil)
		inflight <- outcome{res.Output, err}
	}()
	waitFor(t, func() bool { return a.InFlight() == 1 })

	drained := make(chan error, 1)
	dctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	go func() { drained <- a.Drain(dctx) }()
	waitFor(t, func() bool { return a.Ready() != nil })
	_, err := a.Run(t.Context(), req{session: "other", messages: []string{"say hi"}}.wire(), nil)
	if !errors.Is(err, errdefs.ErrUnavailable) || !strings.Contains(err.Error(), "another replica") {
		t.Fatalf("new turn while draining: %v", err)
	}
	if err := os.WriteFile(gate, nil, 0o600); err != nil {
		t.Fatal(err)
	}
	if got := <-inflight; got.err != nil || !strings.Contains(got.out, "done") {
		t.Fatalf("the in-flight turn did not finish: %q %v", got.out, got.err)
	}
	if err := <-drained; err != nil {
		t.Fatalf("drain: %v", err)
	}
	if err := a.Shutdown(t.Context()); err != nil {
		t.Fatal(err)
	}

	next := collect(t, b, req{session: "s", messages: []string{"what is the password?"}}.wire())
	if !next.res.OK || !strings.Contains(next.res.Output, "swordfish") {
		t.Fatalf("replica b after the restart: mode %q output %q", next.mode, next.res.Output)
	}
	turns, err := sb.ListTurns(t.Context(), sk("s"))
	if err != nil || len(turns) != 3 || turns[1].Owner != "replica-a" || turns[2].Owner != "replica-b" {
		t.Fatalf("ledger %+v %v", turns, err)
	}
}

// unready is a provider that cannot serve a default turn here.
type unready struct{ sandbox.Provider }

func (unready) Ready() error { return errors.New("no /dev/net/tun") }

// TestNotReadyWhileTheDefaultProviderCannotServe: readiness fails, naming
// the provider's cause, while the default provider cannot run a default
// turn (a pod without /dev/net/tun), so no load balancer sends it turns.
func TestNotReadyWhileTheDefaultProviderCannotServe(t *testing.T) {
	p, err := local.New(local.Config{Dir: filepath.Join(t.TempDir(), "sandboxes"), Isolation: "none"})
	if err != nil {
		t.Fatal(err)
	}
	if err := newEnvWith(t, []sandbox.Provider{p}).svc.Ready(); err != nil {
		t.Fatalf("a working provider: Ready() = %v", err)
	}
	err = newEnvWith(t, []sandbox.Provider{unready{p}}).svc.Ready()
	var st interface{ ReadyStatus() string }
	if err == nil || !strings.Contains(err.Error(), "no /dev/net/tun") || !errors.As(err, &st) || st.ReadyStatus() != "sandbox_unavailable" {
		t.Fatalf("Ready() = %v", err)
	}
}
