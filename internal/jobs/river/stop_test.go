package river

import (
	"context"
	"errors"
	"testing"
	"time"

	"github.com/agentrunner/runner/internal/store/storetest"
)

// TestStopStalledPostgres: PostgreSQL stops answering under a started
// queue. Stop must return when its context ends, not when River's own
// deadlines do (a leader resigns under WithoutCancel), and must not
// leave the pool's close running behind it: once the database answers
// again (here: goes away), a second Stop closes the pool, and the
// package's leak check finds nothing left.
func TestStopStalledPostgres(t *testing.T) {
	proxy, url := storetest.ProxiedSchema(t)
	q, err := OpenPostgres(t.Context(), url, Config{Replica: "stalled", ConnectTimeout: time.Second}, nil)
	if err != nil {
		t.Fatal(err)
	}
	if err := q.Start(t.Context()); err != nil {
		t.Fatal(err)
	}
	// Leader first: a leader's stop resigns, a query River bounds only
	// by deadlines of its own (1 s, then 2 s, then 3 s).
	for deadline := time.Now().Add(time.Minute); ; time.Sleep(20 * time.Millisecond) {
		var n int
		if err := q.tab.db.QueryRowContext(t.Context(), `SELECT count(*) FROM river_leader`).Scan(&n); err != nil {
			t.Fatal(err)
		}
		if n > 0 {
			break
		}
		if time.Now().After(deadline) {
			t.Fatal("the queue never became River's leader")
		}
	}
	proxy.Stall()
	ctx, cancel := context.WithTimeout(context.Background(), 500*time.Millisecond)
	defer cancel()
	if err := q.Stop(ctx); !errors.Is(err, context.DeadlineExceeded) {
		t.Fatalf("Stop on a stalled database: %v, want the context's deadline", err)
	}
	select {
	case <-q.river.Stopped():
		t.Fatal("Stop returned only once River had stopped: it waited for River's own deadlines, not its context's")
	default:
	}
	proxy.Close()
	if err := q.Stop(context.Background()); err != nil {
		t.Fatalf("Stop once the database is gone: %v", err)
	}
}
