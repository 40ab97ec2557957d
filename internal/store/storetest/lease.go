package storetest

import (
	"context"
	"errors"
	"fmt"
	"sync"
	"testing"
	"time"

	"github.com/agentrunner/runner/internal/errdefs"
	"github.com/agentrunner/runner/internal/store"
)

// wantLeaseError fails the test unless err is a *store.LeaseError naming
// owner until expires, and classed as ErrConflict.
func wantLeaseError(t *testing.T, err error, owner string, expires time.Time) {
	t.Helper()
	wantErr(t, err, errdefs.ErrConflict)
	var le *store.LeaseError
	if !errors.As(err, &le) {
		t.Fatalf("err = %v, want a *store.LeaseError", err)
	}
	if le.Owner != owner || !le.Expires.Equal(expires) {
		t.Fatalf("lease held by %s until %v, want %s until %v", le.Owner, le.Expires, owner, expires)
	}
}

func testLeases(t *testing.T, st store.Store) {
	ctx := t.Context()
	const ttl = 30 * time.Second
	_, err := st.GetLease(ctx, sk("s"))
	wantErr(t, err, errdefs.ErrNotFound)

	// Free: A takes it. The session need not exist.
	l := must(st.AcquireLease(ctx, sk("s"), "A", t0, ttl))(t)
	equal(t, "AcquireLease", l, store.Lease{SessionID: "s", Owner: "A", Expires: t0.Add(ttl), Generation: 1})
	equal(t, "GetLease", must(st.GetLease(ctx, sk("s")))(t), l)

	// Held: B is refused and told who holds it.
	_, err = st.AcquireLease(ctx, sk("s"), "B", t0.Add(10*time.Second), ttl)
	wantLeaseError(t, err, "A", t0.Add(ttl))
	var le *store.LeaseError
	errors.As(err, &le)
	equal(t, "LeaseError.SessionID", le.SessionID, "s")

	// Same owner: a renewal.
	l = must(st.AcquireLease(ctx, sk("s"), "A", t0.Add(10*time.Second), ttl))(t)
	equal(t, "renewed", l, store.Lease{SessionID: "s", Owner: "A", Expires: t0.Add(40 * time.Second), Generation: 1})

	// Other sessions are independent.
	must(st.AcquireLease(ctx, sk("s2"), "B", t0, ttl))(t)

	// Expired: held until the last millisecond, free at Expires.
	_, err = st.AcquireLease(ctx, sk("s"), "B", t0.Add(40*time.Second-time.Millisecond), ttl)
	wantLeaseError(t, err, "A", t0.Add(40*time.Second))
	l = must(st.AcquireLease(ctx, sk("s"), "B", t0.Add(40*time.Second), ttl))(t)
	equal(t, "taken over", l, store.Lease{SessionID: "s", Owner: "B", Expires: t0.Add(70 * time.Second), Generation: 2})

	// Only the holder releases.
	wantLeaseError(t, st.ReleaseLease(ctx, sk("s"), "A"), "B", t0.Add(70*time.Second))
	equal(t, "GetLease after a refused release", must(st.GetLease(ctx, sk("s")))(t).Owner, "B")
	if err := st.ReleaseLease(ctx, sk("s"), "B"); err != nil {
		t.Fatal(err)
	}
	_, err = st.GetLease(ctx, sk("s"))
	wantErr(t, err, errdefs.ErrNotFound)
	if err := st.ReleaseLease(ctx, sk("s"), "B"); err != nil {
		t.Fatalf("releasing a released lease: %v", err)
	}
	// Released: anyone may take it, whatever the clock says, and the
	// generation goes on from the last owner's.
	equal(t, "after release", must(st.AcquireLease(ctx, sk("s"), "A", t0, ttl))(t).Generation, int64(3))

	for _, bad := range []struct {
		session, owner string
		ttl            time.Duration
	}{
		{"", "A", ttl}, {"s", "", ttl}, {"s", "A", 0}, {"s", "A", -time.Second}, {"s", "A", time.Microsecond},
	} {
		_, err := st.AcquireLease(ctx, sk(bad.session), bad.owner, t0, bad.ttl)
		wantErr(t, err, errdefs.ErrInvalid)
	}
}

// testLeaseRace has many owners reach for a free lease at once: exactly
// one gets it.
func testLeaseRace(t *testing.T, st store.Store) {
	ctx := t.Context()
	const racers = 8
	for round := range 5 {
		session := fmt.Sprintf("s%d", round)
		var (
			wg      sync.WaitGroup
			mu      sync.Mutex
			winners []string
		)
		for r := range racers {
			owner := fmt.Sprintf("r%d", r)
			wg.Go(func() {
				_, err := st.AcquireLease(ctx, sk(session), owner, t0, time.Minute)
				var le *store.LeaseError
				switch {
				case err == nil:
					mu.Lock()
					winners = append(winners, owner)
					mu.Unlock()
				case !errors.As(err, &le):
					t.Errorf("AcquireLease: %v, want nil or a *store.LeaseError", err)
				}
			})
		}
		wg.Wait()
		if len(winners) != 1 {
			t.Fatalf("%s: winners %v, want exactly one", session, winners)
		}
		equal(t, "holder", must(st.GetLease(ctx, sk(session)))(t).Owner, winners[0])
	}
}

// testCancelled checks that a cancelled context stops a call.
func testCancelled(t *testing.T, st store.Store) {
	ctx, cancel := context.WithCancel(t.Context())
	cancel()
	_, err := st.PutSession(ctx, store.Session{ID: "s", Status: store.SessionActive})
	wantErr(t, err, context.Canceled)
	_, err = st.GetSession(ctx, sk("s"))
	wantErr(t, err, context.Canceled)
	_, err = st.AppendEvents(ctx, sk("s"), nil)
	wantErr(t, err, context.Canceled)
	_, err = st.GetSession(t.Context(), sk("s"))
	wantErr(t, err, errdefs.ErrNotFound)
}
