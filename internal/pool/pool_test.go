package pool_test

import (
	"context"
	"sort"
	"sync"
	"testing"
	"time"

	"github.com/agentrunner/runner/internal/pool"
	"github.com/agentrunner/runner/internal/pool/pooltest"
	"github.com/google/go-cmp/cmp"
)

type recorder struct {
	mu       sync.Mutex
	released map[string]string
	done     chan string
}

func newRecorder() *recorder {
	return &recorder{released: map[string]string{}, done: make(chan string, 100)}
}

func (r *recorder) entry(key string) *pool.Entry {
	return &pool.Entry{Key: key, Release: func(ctx context.Context, reason string) {
		r.mu.Lock()
		r.released[key] = reason
		r.mu.Unlock()
		r.done <- key
	}}
}

func (r *recorder) wait(t *testing.T, n int) {
	t.Helper()
	for i := 0; i < n; i++ {
		select {
		case <-r.done:
		case <-time.After(10 * time.Second):
			t.Fatalf("only %d of %d releases", i, n)
		}
	}
}

func (r *recorder) got() map[string]string {
	r.mu.Lock()
	defer r.mu.Unlock()
	out := map[string]string{}
	for k, v := range r.released {
		out[k] = v
	}
	return out
}

func newPool(max int) (*pool.Pool, *pooltest.Clock, *recorder) {
	c := pooltest.NewClock(time.Unix(1000, 0))
	p := pool.New(pool.Config{Max: max, IdleTTL: time.Minute, ApprovalTTL: 10 * time.Minute, Clock: c})
	return p, c, newRecorder()
}

func TestIdleAndApprovalTTL(t *testing.T) {
	p, c, r := newPool(8)
	defer p.Close()
	p.Park(r.entry("idle"), false)
	p.Park(r.entry("approval"), true)
	c.Advance(59 * time.Second)
	if p.Len() != 2 {
		t.Fatalf("len %d before TTL", p.Len())
	}
	c.Advance(2 * time.Second)
	r.wait(t, 1)
	if diff := cmp.Diff(map[string]string{"idle": pool.ReasonIdleExpiry}, r.got()); diff != "" {
		t.Fatal(diff)
	}
	c.Advance(9 * time.Minute)
	r.wait(t, 1)
	if got := r.got()["approval"]; got != pool.ReasonApprovalExpiry {
		t.Fatalf("approval released with %q", got)
	}
}

func TestCheckoutStopsTheTimer(t *testing.T) {
	p, c, r := newPool(8)
	defer p.Close()
	e := r.entry("s")
	p.Park(e, false)
	got, ok := p.Checkout("s")
	if !ok || got != e {
		t.Fatal("checkout missed")
	}
	c.Advance(time.Hour)
	if len(r.got()) != 0 {
		t.Fatalf("checked-out entry released: %v", r.got())
	}
	if _, ok := p.Checkout("s"); ok {
		t.Fatal("second checkout of the same entry")
	}
}

func TestLRUEvictsOldestIdleOnly(t *testing.T) {
	p, c, r := newPool(2)
	defer p.Close()
	p.Park(r.entry("waiting"), true)
	c.Advance(time.Second)
	p.Park(r.entry("a"), false)
	c.Advance(time.Second)
	p.Park(r.entry("b"), false)
	r.wait(t, 1)
	if diff := cmp.Diff(map[string]string{"a": pool.ReasonEvicted}, r.got()); diff != "" {
		t.Fatal(diff)
	}
	keys := p.Keys()
	sort.Strings(keys)
	if diff := cmp.Diff([]string{"b", "waiting"}, keys); diff != "" {
		t.Fatal(diff)
	}
}

func TestParkSupersedes(t *testing.T) {
	p, _, r := newPool(8)
	defer p.Close()
	p.Park(r.entry("s"), false)
	p.Park(r.entry("s"), false)
	r.wait(t, 1)
	if p.Len() != 1 {
		t.Fatalf("len %d", p.Len())
	}
}

func TestCloseReleasesEverything(t *testing.T) {
	p, _, r := newPool(8)
	p.Park(r.entry("a"), false)
	p.Park(r.entry("b"), true)
	p.Close()
	if len(r.got()) != 2 {
		t.Fatalf("released %v", r.got())
	}
	p.Park(r.entry("late"), false) // after Close: released at once
	if r.got()["late"] != pool.ReasonShutdownIdle {
		t.Fatalf("late park: %v", r.got())
	}
}

func TestParkable(t *testing.T) {
	for reason, want := range map[string]bool{
		pool.ReasonIdleExpiry: true, pool.ReasonCleanResumable: true, pool.ReasonContinuityInvalid: true,
		pool.ReasonKill: false, pool.ReasonFailedTurn: true, pool.ReasonSetupFailed: false, pool.ReasonRuntimeChanged: false, "something-new": false,
	} {
		if got := pool.Parkable(reason); got != want {
			t.Errorf("Parkable(%q) = %v", reason, got)
		}
	}
}
