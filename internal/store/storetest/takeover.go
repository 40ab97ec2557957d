package storetest

import (
	"errors"
	"fmt"
	"sync"
	"testing"
	"time"

	"github.com/agentrunner/runner/internal/errdefs"
	"github.com/agentrunner/runner/internal/store"
)

// testLeaseGenerations follows a session's generation through every
// change of owner: it is raised by each new owner and by nothing else.
func testLeaseGenerations(t *testing.T, st store.Store) {
	ctx := t.Context()
	const ttl = 30 * time.Second
	gen := func(l store.Lease) int64 { return l.Generation }

	equal(t, "first owner", gen(must(st.AcquireLease(ctx, sk("s"), "A", t0, ttl))(t)), int64(1))
	equal(t, "renewed", gen(must(st.AcquireLease(ctx, sk("s"), "A", t0.Add(time.Second), ttl))(t)), int64(1))
	// Expired and renewed by its owner before anyone else took it: no
	// other owner wrote in between, so the generation stands.
	equal(t, "renewed late", gen(must(st.AcquireLease(ctx, sk("s"), "A", t0.Add(time.Hour), ttl))(t)), int64(1))

	// The refusal names the holder's generation, what a takeover needs.
	_, err := st.AcquireLease(ctx, sk("s"), "B", t0.Add(time.Hour), ttl)
	var le *store.LeaseError
	if !errors.As(err, &le) {
		t.Fatalf("AcquireLease of a held lease: %v, want a *store.LeaseError", err)
	}
	equal(t, "LeaseError.Lease", le.Lease(), store.Lease{SessionID: "s", Owner: "A", Expires: t0.Add(time.Hour + ttl), Generation: 1})

	// Expired, taken by another owner: raised.
	late := t0.Add(2 * time.Hour)
	equal(t, "expired, taken by B", gen(must(st.AcquireLease(ctx, sk("s"), "B", late, ttl))(t)), int64(2))
	// Released by B, taken back by B: a new owner as far as the writes
	// in between are concerned (A might have taken it), so raised.
	if err := st.ReleaseLease(ctx, sk("s"), "B"); err != nil {
		t.Fatal(err)
	}
	equal(t, "released, taken by B", gen(must(st.AcquireLease(ctx, sk("s"), "B", late, ttl))(t)), int64(3))
	if err := st.ReleaseLease(ctx, sk("s"), "B"); err != nil {
		t.Fatal(err)
	}
	equal(t, "released, taken by A", gen(must(st.AcquireLease(ctx, sk("s"), "A", late, ttl))(t)), int64(4))
	equal(t, "GetLease", gen(must(st.GetLease(ctx, sk("s")))(t)), int64(4))

	// Another session, and the same id in another project, start at 1.
	equal(t, "other session", gen(must(st.AcquireLease(ctx, sk("s2"), "A", t0, ttl))(t)), int64(1))
	other := store.SessionKey{ProjectID: "p", SessionID: "s"}
	equal(t, "other project", gen(must(st.AcquireLease(ctx, other, "B", t0, ttl))(t)), int64(1))
}

// testTakeOver checks the compare-and-set: a takeover succeeds only from
// the lease as it stands, expired or not.
func testTakeOver(t *testing.T, st store.Store) {
	ctx := t.Context()
	const ttl = 30 * time.Second
	a := must(st.AcquireLease(ctx, sk("s"), "A", t0, ttl))(t)

	// A live lease is taken over: the caller found its owner gone.
	now := t0.Add(time.Second)
	b := must(st.TakeOverLease(ctx, sk("s"), "B", a, now, ttl))(t)
	equal(t, "taken over", b, store.Lease{SessionID: "s", Owner: "B", Expires: now.Add(ttl), Generation: 2})
	equal(t, "GetLease", must(st.GetLease(ctx, sk("s")))(t), b)

	// A stale view of the lease (A's, now B's) is refused, naming B.
	_, err := st.TakeOverLease(ctx, sk("s"), "C", a, now, ttl)
	wantLeaseError(t, err, "B", now.Add(ttl))
	// So is a view with the right owner and a wrong generation.
	stale := b
	stale.Generation = 1
	_, err = st.TakeOverLease(ctx, sk("s"), "C", stale, now, ttl)
	wantLeaseError(t, err, "B", now.Add(ttl))
	// The old owner cannot renew what was taken from it.
	_, err = st.AcquireLease(ctx, sk("s"), "A", now, ttl)
	wantLeaseError(t, err, "B", now.Add(ttl))

	// An expired lease is taken over as well.
	later := t0.Add(time.Hour)
	c := must(st.TakeOverLease(ctx, sk("s"), "C", b, later, ttl))(t)
	equal(t, "expired, taken over", c.Generation, int64(3))

	// A renewal after the takeover keeps the new generation; a takeover
	// from it carries on counting.
	c = must(st.AcquireLease(ctx, sk("s"), "C", later.Add(time.Second), ttl))(t)
	equal(t, "renewed after takeover", c.Generation, int64(3))
	equal(t, "taken over again", must(st.TakeOverLease(ctx, sk("s"), "A", c, later, ttl))(t).Generation, int64(4))

	// A free lease is not taken over: acquire it.
	if err := st.ReleaseLease(ctx, sk("s"), "A"); err != nil {
		t.Fatal(err)
	}
	_, err = st.TakeOverLease(ctx, sk("s"), "B", c, later, ttl)
	wantErr(t, err, errdefs.ErrNotFound)
	_, err = st.TakeOverLease(ctx, sk("never"), "B", store.Lease{SessionID: "never", Owner: "A", Generation: 1}, later, ttl)
	wantErr(t, err, errdefs.ErrNotFound)

	// The project scopes it: taking over p/s leaves s alone.
	p := store.SessionKey{ProjectID: "p", SessionID: "s"}
	pl := must(st.AcquireLease(ctx, p, "A", t0, ttl))(t)
	must(st.AcquireLease(ctx, sk("s"), "A", later, ttl))(t)
	before := must(st.GetLease(ctx, sk("s")))(t)
	equal(t, "p/s taken over", must(st.TakeOverLease(ctx, p, "B", pl, later, ttl))(t).Owner, "B")
	equal(t, "s untouched", must(st.GetLease(ctx, sk("s")))(t), before)

	for _, bad := range []struct {
		owner string
		from  store.Lease
		ttl   time.Duration
	}{
		{"", pl, ttl},
		{"B", store.Lease{Generation: 1}, ttl},
		{"B", store.Lease{Owner: "A"}, ttl},
		{"B", pl, 0},
	} {
		_, err := st.TakeOverLease(ctx, p, bad.owner, bad.from, later, bad.ttl)
		wantErr(t, err, errdefs.ErrInvalid)
	}
}

// testTakeOverRace has many replicas take over one dead owner's lease at
// once: exactly one wins, and the losers are told who did.
func testTakeOverRace(t *testing.T, st store.Store) {
	ctx := t.Context()
	const racers = 8
	for round := range 5 {
		k := sk(fmt.Sprintf("s%d", round))
		dead := must(st.AcquireLease(ctx, k, "dead", t0, time.Minute))(t)
		var (
			wg      sync.WaitGroup
			mu      sync.Mutex
			winners []string
			losers  []*store.LeaseError
		)
		for r := range racers {
			owner := fmt.Sprintf("r%d", r)
			wg.Go(func() {
				_, err := st.TakeOverLease(ctx, k, owner, dead, t0, time.Minute)
				var le *store.LeaseError
				mu.Lock()
				defer mu.Unlock()
				switch {
				case err == nil:
					winners = append(winners, owner)
				case errors.As(err, &le):
					losers = append(losers, le)
				default:
					t.Errorf("TakeOverLease: %v, want nil or a *store.LeaseError", err)
				}
			})
		}
		wg.Wait()
		if len(winners) != 1 {
			t.Fatalf("%s: winners %v, want exactly one", k, winners)
		}
		for _, le := range losers {
			equal(t, "loser told", []any{le.Owner, le.Generation}, []any{winners[0], int64(2)})
		}
		equal(t, "holder", must(st.GetLease(ctx, k))(t).Owner, winners[0])
	}
}

// testReplicas checks the replica registry.
func testReplicas(t *testing.T, st store.Store) {
	ctx := t.Context()
	equal(t, "empty registry", len(must(st.ListReplicas(ctx))(t)), 0)
	_, err := st.GetReplica(ctx, "a")
	wantErr(t, err, errdefs.ErrNotFound)

	a := store.Replica{ID: "a", AdvertiseURL: "http://10.0.0.1:8765", StartedAt: t0, HeartbeatAt: t0}
	equal(t, "PutReplica", must(st.PutReplica(ctx, a))(t), a)
	b := store.Replica{ID: "b", AdvertiseURL: "http://10.0.0.2:8765", StartedAt: t0, HeartbeatAt: t0.Add(time.Second)}
	must(st.PutReplica(ctx, b))(t)

	// A heartbeat replaces the row.
	a.HeartbeatAt, a.Draining = t0.Add(5*time.Second), true
	equal(t, "heartbeat", must(st.PutReplica(ctx, a))(t), a)
	equal(t, "GetReplica", must(st.GetReplica(ctx, "a"))(t), a)
	equal(t, "ListReplicas", must(st.ListReplicas(ctx))(t), []store.Replica{a, b})

	if err := st.DeleteReplica(ctx, "a"); err != nil {
		t.Fatal(err)
	}
	_, err = st.GetReplica(ctx, "a")
	wantErr(t, err, errdefs.ErrNotFound)
	if err := st.DeleteReplica(ctx, "a"); err != nil {
		t.Fatalf("deleting a deleted replica: %v", err)
	}
	equal(t, "after delete", must(st.ListReplicas(ctx))(t), []store.Replica{b})

	_, err = st.PutReplica(ctx, store.Replica{AdvertiseURL: "http://x"})
	wantErr(t, err, errdefs.ErrInvalid)
}
