package runner_test

import (
	"context"
	"fmt"
	"testing"

	"github.com/agentrunner/runner/internal/wire"
)

// Every session's turn and follower takes the session's hub; once they are
// done the hub goes, so the service does not keep one per session it ever
// served.
func TestHubsDoNotOutliveTheirTurnsAndFollowers(t *testing.T) {
	e := newEnv(t)
	for i := range 3 {
		e.turn(t, req{session: fmt.Sprintf("s%d", i), messages: []string{"say hi"}})
	}
	ctx, cancel := context.WithCancel(t.Context())
	defer cancel()
	// A follower of the log: it stops once it has the backlog.
	err := e.svc.Events(ctx, sk("s1"), 0, true, func(wire.Record) error { cancel(); return nil })
	if err != nil {
		t.Fatal(err)
	}
	if n := e.svc.Hubs(); n != 0 {
		t.Fatalf("%d hubs kept after every turn and follower ended, want 0", n)
	}
}
