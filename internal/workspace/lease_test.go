package workspace_test

import (
	"context"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/agentrunner/runner/internal/workspace"
)

type clock struct {
	mu  sync.Mutex
	now time.Time
}

func (c *clock) Now() time.Time { c.mu.Lock(); defer c.mu.Unlock(); return c.now }
func (c *clock) add(d time.Duration) {
	c.mu.Lock()
	c.now = c.now.Add(d)
	c.mu.Unlock()
}

// signer mints leases of ttl on the injected clock, numbered by key.
type signer struct {
	clk   *clock
	ttl   time.Duration
	n     int
	noExp bool
}

func (s *signer) Sign(context.Context) (workspace.Lease, error) {
	s.n++
	l := workspace.Lease{Bucket: "b", AccessKey: "k" + string(rune('0'+s.n)), SecretKey: "s"}
	if !s.noExp {
		l.ExpiresAt = s.clk.Now().Add(s.ttl)
	}
	return l, nil
}

func TestKeeperResignsBeforeEightyPercent(t *testing.T) {
	clk := &clock{now: time.Unix(1_000_000, 0)}
	src := &signer{clk: clk, ttl: 100 * time.Second}
	k := workspace.NewKeeper(src, clk.Now)
	ctx := context.Background()
	l1, err := k.Lease(ctx)
	if err != nil {
		t.Fatal(err)
	}
	clk.add(79 * time.Second)
	if l, _ := k.Lease(ctx); l.AccessKey != l1.AccessKey {
		t.Fatal("re-signed before 80% of the lifetime")
	}
	clk.add(time.Second)
	l2, _ := k.Lease(ctx)
	if l2.AccessKey == l1.AccessKey {
		t.Fatal("not re-signed at 80% of the lifetime")
	}
	// A long turn: leases keep rolling, none is ever used expired.
	for range 50 {
		clk.add(30 * time.Second)
		l, err := k.Lease(ctx)
		if err != nil {
			t.Fatal(err)
		}
		if !l.ExpiresAt.After(clk.Now().Add(19 * time.Second)) {
			t.Fatalf("lease in use expires at %s, now %s", l.ExpiresAt, clk.Now())
		}
	}
}

func TestKeeperRefusesNoExpiry(t *testing.T) {
	clk := &clock{now: time.Unix(1_000_000, 0)}
	k := workspace.NewKeeper(&signer{clk: clk, noExp: true}, clk.Now)
	_, err := k.Lease(context.Background())
	if err == nil || !strings.Contains(err.Error(), "no expiry") {
		t.Fatalf("lease without expiry: %v, want refused", err)
	}
}

func TestKeeperRefreshesForTheDeadline(t *testing.T) {
	clk := &clock{now: time.Unix(1_000_000, 0)}
	src := &signer{clk: clk, ttl: time.Hour}
	k := workspace.NewKeeper(src, clk.Now)
	ctx := context.Background()
	l1, _ := k.Lease(ctx)
	clk.add(10 * time.Minute)
	k.SetHorizon(clk.Now().Add(2 * time.Hour)) // the turn may run past the lease
	l2, _ := k.Lease(ctx)
	if l2.AccessKey == l1.AccessKey {
		t.Fatal("a lease that cannot outlive the turn was kept")
	}
	if l3, _ := k.Lease(ctx); l3.AccessKey != l2.AccessKey {
		t.Fatal("re-signed again for the same horizon")
	}
}

func TestKeeperRenewOnce(t *testing.T) {
	clk := &clock{now: time.Unix(1_000_000, 0)}
	src := &signer{clk: clk, ttl: time.Hour}
	k := workspace.NewKeeper(src, clk.Now)
	ctx := context.Background()
	l1, _ := k.Lease(ctx)
	l2, _ := k.Renew(ctx, l1)
	if l2.AccessKey == l1.AccessKey {
		t.Fatal("renew kept the refused lease")
	}
	// A second caller refused with the same old lease gets the new one.
	if l3, _ := k.Renew(ctx, l1); l3.AccessKey != l2.AccessKey || src.n != 2 {
		t.Fatalf("second renew signed again (%d signs)", src.n)
	}
}

func TestKeeperUsesNewSource(t *testing.T) {
	clk := &clock{now: time.Unix(1_000_000, 0)}
	first := &signer{clk: clk, ttl: 100 * time.Second}
	k := workspace.NewKeeper(first, clk.Now)
	ctx := context.Background()
	_, _ = k.Lease(ctx)
	second := &signer{clk: clk, ttl: 100 * time.Second}
	k.SetSource(second) // a warm turn brings its own credential
	clk.add(90 * time.Second)
	if _, err := k.Lease(ctx); err != nil {
		t.Fatal(err)
	}
	if first.n != 1 || second.n != 1 {
		t.Fatalf("re-signed with the first turn's source: first %d, second %d", first.n, second.n)
	}
}
