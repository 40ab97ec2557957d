package runner

import (
	"context"
	"errors"
	"log/slog"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"

	"github.com/agentrunner/runner/internal/pool"
)

// A failed stage unwinds what the earlier ones set up, and its own
// partial setup, last first, under a context the caller's cancel does not
// reach; the stages after it never run. A release later unwinds the rest
// the same way, once.
func TestStagesUnwindInReverse(t *testing.T) {
	var got []string
	step := func(name string, fail bool) stage {
		return stage{name, func(context.Context) (undo, error) {
			got = append(got, "setup "+name)
			u := func(ctx context.Context, reason string) {
				_, bounded := ctx.Deadline()
				got = append(got, "undo "+name+" "+reason)
				if ctx.Err() != nil || !bounded {
					t.Errorf("undo %s: context err %v, deadline %v; want live and bounded", name, ctx.Err(), bounded)
				}
			}
			if fail {
				return u, errors.New(name + " failed")
			}
			return u, nil
		}}
	}
	none := stage{"none", func(context.Context) (undo, error) { got = append(got, "setup none"); return nil, nil }}
	ctx, cancel := context.WithCancel(t.Context())
	cancel() // the caller is gone: teardown still runs
	lv := &live{}
	err := lv.setUp(ctx, slog.New(slog.DiscardHandler), time.Minute, []stage{step("a", false), none, step("b", false), step("c", true), step("d", false)})
	if err == nil || err.Error() != "c failed" {
		t.Fatalf("setUp: %v, want c's error", err)
	}
	want := []string{"setup a", "setup none", "setup b", "setup c",
		"undo c " + pool.ReasonSetupFailed, "undo b " + pool.ReasonSetupFailed, "undo a " + pool.ReasonSetupFailed}
	if diff := cmp.Diff(want, got); diff != "" {
		t.Fatalf("failed setup (-want +got):\n%s", diff)
	}

	got = nil
	lv = &live{}
	if err := lv.setUp(t.Context(), slog.New(slog.DiscardHandler), time.Minute, []stage{step("a", false), step("b", false)}); err != nil {
		t.Fatal(err)
	}
	rctx, rcancel := context.WithTimeout(t.Context(), time.Minute)
	defer rcancel()
	lv.release(rctx, pool.ReasonAborted)
	lv.release(rctx, pool.ReasonAborted) // a second release finds nothing left
	want = []string{"setup a", "setup b", "undo b " + pool.ReasonAborted, "undo a " + pool.ReasonAborted}
	if diff := cmp.Diff(want, got); diff != "" {
		t.Fatalf("release (-want +got):\n%s", diff)
	}
}
