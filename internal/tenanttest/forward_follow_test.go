package tenanttest

import (
	"bufio"
	"context"
	"net/http"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"

	"github.com/agentrunner/runner/internal/store"
)

// gatedTurn is a fake turn that says "started", waits until the file gate
// exists (isolation none: the harness sees the test's files) and says
// "finished": it runs exactly as long as the test wants.
func gatedTurn(gate string) string {
	return "say started\nexec while [ ! -e " + gate + " ]; do sleep 0.05; done\nsay finished"
}

// lines reads a stream's lines onto a channel, closed at the stream's end.
// The reader ends at the test's cleanup, once the test closed the body.
func lines(t *testing.T, body *bufio.Scanner) <-chan string {
	ch := make(chan string)
	stop, done := make(chan struct{}), make(chan struct{})
	go func() {
		defer close(done)
		defer close(ch)
		for body.Scan() {
			select {
			case ch <- body.Text():
			case <-stop:
				return
			}
		}
	}()
	t.Cleanup(func() { close(stop); <-done })
	return ch
}

// next waits for the first line of ch containing want and returns whether
// it came before the stream ended or the test's bound.
func next(t *testing.T, ch <-chan string, want string) bool {
	t.Helper()
	deadline := time.After(time.Minute)
	for {
		select {
		case l, ok := <-ch:
			if !ok {
				return false
			}
			if strings.Contains(l, want) {
				return true
			}
		case <-deadline:
			return false
		}
	}
}

// TestForwardEventsFollow: a live events follow sent to a replica that
// does not hold the session, while the holder runs its turn. Must hold:
// the follower sees the turn's events as the owner writes them (an event
// arrives while the turn still runs: the turn waits on a gate the test
// opens only after the follower saw it), pings pass through while the
// turn is silent, and the turn's last event follows. (A follow stays open
// after the turn, as on the owner itself, until its caller leaves.)
func TestForwardEventsFollow(t *testing.T) {
	rs, _ := peerCluster(t, 2, "AGENTA_RUNNER_STREAM_PING_MS=100")
	owner, other := rs[0], rs[1]
	gate := filepath.Join(t.TempDir(), "gate")
	resp := owner.do(t, t.Context(), "POST", "/stream", fake(gatedTurn(gate), map[string]any{"sessionId": "followed", "projectId": "p"}), "application/x-ndjson")
	defer resp.Body.Close()
	turn := lines(t, bufio.NewScanner(resp.Body))
	if !next(t, turn, "started") {
		t.Fatalf("the owner's turn never said started\nowner log:\n%s", owner.Log())
	}

	ctx, cancel := context.WithTimeout(t.Context(), 2*time.Minute)
	defer cancel()
	fresp := other.do(t, ctx, "GET", "/v1/sessions/followed/events?follow=1&projectId=p", nil, "application/x-ndjson")
	defer fresp.Body.Close()
	if fresp.StatusCode != http.StatusOK {
		t.Fatalf("follow through the other replica: %d", fresp.StatusCode)
	}
	follow := lines(t, bufio.NewScanner(fresp.Body))
	if !next(t, follow, "started") {
		t.Fatalf("the follower on the other replica never saw the running turn's first event\nowner log:\n%s\nother log:\n%s", owner.Log(), other.Log())
	}
	if !next(t, follow, `"kind":"ping"`) {
		t.Fatal("no ping reached the follower while the turn was silent")
	}
	if err := os.WriteFile(gate, nil, 0o600); err != nil {
		t.Fatal(err)
	}
	if !next(t, follow, "finished") {
		t.Fatal("the follower never saw the turn's last event")
	}
	if !next(t, turn, `"kind":"result"`) {
		t.Fatal("the owner's turn ended without a result")
	}
}

// TestForwardCallerLeaves: a client that goes away in the middle of a
// session's turn, connected to the replica holding the session or to
// another that forwards the turn there. Must hold, the same either way
// (docs/turns.md: a session's turn outlives its caller): the holder sees
// its caller gone (the connection it served the turn on is closed while
// the turn still runs), the turn runs on to its end and is recorded
// completed with every event, and the session's next turn reaches the
// same warm harness.
func TestForwardCallerLeaves(t *testing.T) {
	rs, url := peerCluster(t, 2)
	owner, other := rs[0], rs[1]
	st := openShared(t, url)
	// established counts the owner's ends of TCP connections that are
	// established (the kernel's table, no request of its own): a caller
	// that leaves moves its connection's owner end to CLOSE_WAIT, or
	// closes it. The owner's handler waits for the session's turn, which
	// outlives its caller, so /health's count would not change.
	port := owner.Base[strings.LastIndex(owner.Base, ":")+1:]
	established := func() int {
		b, err := os.ReadFile("/proc/net/tcp")
		if err != nil {
			t.Fatal(err)
		}
		n := 0
		for _, l := range strings.Split(string(b), "\n")[1:] {
			f := strings.Fields(l)
			if len(f) < 4 || f[3] != "01" { // 01: ESTABLISHED
				continue
			}
			if _, p, ok := strings.Cut(f[1], ":"); ok {
				if v, err := strconv.ParseUint(p, 16, 16); err == nil && strconv.FormatUint(v, 10) == port {
					n++
				}
			}
		}
		return n
	}
	type outcome struct {
		Statuses []store.TurnStatus
		Said     bool // "finished" is in the session's log
		Warm     bool // the next turn reached the first turn's harness
	}
	leave := func(t *testing.T, sid string, via *runner) outcome {
		first := owner.stream(t, fake("pid", map[string]any{"sessionId": sid, "projectId": "p"}))
		if !first.Result.OK {
			t.Fatal(first.Raw)
		}
		gate := filepath.Join(t.TempDir(), "gate")
		ctx, cancel := context.WithCancel(t.Context())
		defer cancel()
		// A connection of its own, closed when the client leaves.
		req := via.request(t, ctx, "POST", "/stream", fake(gatedTurn(gate), map[string]any{"sessionId": sid, "projectId": "p"}), "application/x-ndjson")
		resp, err := oneShot.Do(req)
		if err != nil {
			t.Fatal(err)
		}
		if !next(t, lines(t, bufio.NewScanner(resp.Body)), "started") {
			t.Fatalf("the turn through %s never said started\nowner log:\n%s", via.Base, owner.Log())
		}
		held := established()
		cancel()
		resp.Body.Close()
		// The owner sees its caller gone while the turn still runs (the
		// gate is shut): the connection the turn came on is closed.
		for deadline := time.Now().Add(time.Minute); established() >= held; time.Sleep(20 * time.Millisecond) {
			if time.Now().After(deadline) {
				t.Fatalf("the owner still has %d established connections a minute after the client through %s left, as many as before", held, via.Base)
			}
		}
		if err := os.WriteFile(gate, nil, 0o600); err != nil {
			t.Fatal(err)
		}
		var o outcome
		for deadline := time.Now().Add(time.Minute); ; time.Sleep(20 * time.Millisecond) {
			turns := turnsOf(t, st, sid)
			if len(turns) == 2 && turns[1].Status != store.TurnRunning {
				for _, tr := range turns {
					o.Statuses = append(o.Statuses, tr.Status)
				}
				break
			}
			if time.Now().After(deadline) {
				t.Fatalf("the left turn never ended: %+v", turns)
			}
		}
		for _, l := range logOf(t, st, sid) {
			o.Said = o.Said || strings.Contains(l, "finished")
		}
		again := via.stream(t, fake("pid", map[string]any{"sessionId": sid, "projectId": "p"}))
		o.Warm = again.Result.OK && pidOf(again) == pidOf(first)
		return o
	}
	direct := leave(t, "direct", owner)
	forwarded := leave(t, "forwarded", other)
	want := outcome{Statuses: []store.TurnStatus{store.TurnCompleted, store.TurnCompleted}, Said: true, Warm: true}
	if diff := cmp.Diff(want, direct); diff != "" {
		t.Errorf("a client of the owner left its turn (-want +got):\n%s", diff)
	}
	if diff := cmp.Diff(direct, forwarded); diff != "" {
		t.Errorf("a client of the other replica left its forwarded turn, unlike one of the owner (-direct +forwarded):\n%s", diff)
	}
}
