package tenanttest

import (
	"bufio"
	"encoding/json"
	"fmt"
	"math/rand/v2"
	"net/http"
	"os"
	"path/filepath"
	"regexp"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/agentrunner/runner/internal/peer"
	"github.com/agentrunner/runner/internal/store"
	"github.com/agentrunner/runner/internal/store/postgres"
	"github.com/agentrunner/runner/internal/store/storetest"
	"github.com/agentrunner/runner/internal/wire"
)

// peerCluster starts n `runner serve` replicas on one fresh PostgreSQL
// schema, behind no balancer: the test picks the replica of every
// request. It returns them and the schema's URL.
func peerCluster(t testing.TB, n int, env ...string) ([]*runner, string) {
	t.Helper()
	url := storetest.PostgresSchema(t)
	var rs []*runner
	for i := range n {
		rs = append(rs, start(t, append(replicaEnv(url, i), env...)...))
	}
	return rs, url
}

// replicaEnv is the environment of peerCluster's replica i on url.
func replicaEnv(url string, i int) []string {
	return []string{
		"AGENTA_RUNNER_DATABASE_URL=" + url,
		"AGENTA_RUNNER_REPLICA_ID=replica-" + strconv.Itoa(i),
		// The routing is under test, not the walls: host processes
		// keep 30 warm sessions cheap on a shared machine.
		"AGENTA_RUNNER_LOCAL_ISOLATION=none",
		"AGENTA_RUNNER_LOCAL_DISK_MB=0",
		"AGENTA_RUNNER_SESSION_POOL_MAX=64",
		"AGENTA_RUNNER_SESSION_TTL_MS=600000",
		"AGENTA_RUNNER_JOBS=off",
	}
}

var (
	pidLine     = regexp.MustCompile(`pid (\d+)`)
	historyLine = regexp.MustCompile(`history (\d+):`)
)

// pidOf is the harness process id a fake turn said ("pid" directive).
func pidOf(tr turn) string {
	m := pidLine.FindStringSubmatch(tr.Text())
	if m == nil {
		return ""
	}
	return m[1]
}

// TestForwardAnyReplicaServesAnySession: 3 replicas on one PostgreSQL, 30
// sessions of 6 turns, each turn sent to a replica picked at random.
// Must hold: every turn succeeds (no 409 "owned by another replica");
// every follow-up turn reaches the harness process the session's first
// turn started, wherever the turn landed (forwarded to the replica that
// holds the session, the harness warm); the harness remembers every
// prompt of its session.
func TestForwardAnyReplicaServesAnySession(t *testing.T) {
	rs, _ := peerCluster(t, 3)
	const sessions, turns = 30, 6
	seed := uint64(time.Now().UnixNano())
	t.Logf("seed %d", seed)
	t.Run("sessions", func(t *testing.T) {
		for s := range sessions {
			sid := fmt.Sprintf("s%02d", s)
			t.Run(sid, func(t *testing.T) {
				t.Parallel()
				rnd := rand.New(rand.NewPCG(seed, uint64(s)))
				var first string
				for i := range turns {
					r := rs[rnd.IntN(len(rs))]
					tr := r.stream(t, fake(fmt.Sprintf("pid\nhistory\nsay turn %d", i), map[string]any{"sessionId": sid, "projectId": "p"}))
					if tr.Status != 200 || !tr.Result.OK {
						t.Fatalf("turn %d on %s: %d %+v\n%s", i, r.Base, tr.Status, tr.Result, tr.Raw)
					}
					pid := pidOf(tr)
					if i == 0 {
						first = pid
					}
					if pid == "" || pid != first {
						t.Fatalf("turn %d on %s reached harness pid %q, the session's is %q: not the warm harness\n%s", i, r.Base, pid, first, tr.Text())
					}
					// "history" says the prompts before this one.
					if m := historyLine.FindStringSubmatch(tr.Text()); m == nil || m[1] != strconv.Itoa(i) || i > 0 && !strings.Contains(tr.Text(), fmt.Sprintf("say turn %d", i-1)) {
						t.Fatalf("turn %d: the harness remembers %v prompts, want %d\n%s", i, m, i, tr.Text())
					}
				}
			})
		}
	})
}

// TestForwardKillApprovalDelete: /kill, an approval's answer and DELETE
// sent to a replica that does not hold the session act on the one that
// does: the running turn stops, the paused harness resumes warm (the same
// process answers), the warm harness is closed there.
func TestForwardKillApprovalDelete(t *testing.T) {
	rs, _ := peerCluster(t, 2)
	owner, other := rs[0], rs[1]

	// An approval answered through the other replica resumes the paused
	// harness on the owner.
	req := fake("pid\npermission deploy\npid", map[string]any{"sessionId": "ask", "projectId": "p", "permissions": map[string]any{"default": "ask"}})
	tr := owner.stream(t, req)
	if !tr.Result.OK || tr.Result.StopReason != "paused" {
		t.Fatalf("want a paused turn: %+v\n%s", tr.Result, tr.Raw)
	}
	var iid string
	for _, ev := range tr.Events {
		if ev.Type == wire.EventInteractionReq {
			iid = ev.ID
		}
	}
	status, body := other.call(t, "POST", "/v1/sessions/ask/interactions/"+iid+"?projectId=p", map[string]any{"approved": true})
	var res wire.Result
	_ = json.Unmarshal(body, &res)
	if status != 200 || !res.OK || !strings.Contains(res.Output, "permission selected:yes-once") {
		t.Fatalf("answer through the other replica: %d %s", status, body)
	}
	if got := pidLine.FindAllStringSubmatch(res.Output, -1); len(got) != 1 || got[0][1] != pidOf(tr) {
		t.Fatalf("the answer resumed harness %v, the paused one is %s: not warm on the owner\n%s", got, pidOf(tr), res.Output)
	}

	// /kill through the other replica stops the turn running on the owner.
	resp := owner.do(t, t.Context(), "POST", "/stream", fake("say started\nsleep 120s\nsay never", map[string]any{"sessionId": "long", "projectId": "p"}), "application/x-ndjson")
	defer resp.Body.Close()
	sc := bufio.NewScanner(resp.Body)
	for sc.Scan() && !strings.Contains(sc.Text(), "started") {
	}
	status, body = other.call(t, "POST", "/kill", map[string]any{"sessionId": "long", "projectId": "p"})
	if status != 200 || !strings.Contains(string(body), `"killed":1`) {
		t.Fatalf("kill through the other replica: %d %s\nowner log:\n%s", status, body, owner.Log())
	}
	var last string
	for sc.Scan() {
		last = sc.Text()
	}
	if !strings.Contains(last, `"kind":"result"`) || strings.Contains(last, "never") {
		t.Fatalf("the killed turn's stream ended with %q", last)
	}

	// DELETE through the other replica closes the owner's warm harness.
	if tr := owner.stream(t, fake("say hi", map[string]any{"sessionId": "gone", "projectId": "p"})); !tr.Result.OK {
		t.Fatal(tr.Raw)
	}
	warm := func(r *runner) int {
		_, body := r.call(t, "GET", "/health", nil)
		var h struct{ Warm int }
		_ = json.Unmarshal(body, &h)
		return h.Warm
	}
	before := warm(owner)
	if status, body := other.call(t, "DELETE", "/v1/sessions/gone?projectId=p", nil); status != 200 {
		t.Fatalf("delete through the other replica: %d %s", status, body)
	}
	if after := warm(owner); after != before-1 {
		t.Fatalf("the owner's warm sessions went from %d to %d, want one fewer", before, after)
	}
}

// TestForwardOnlyOnce: a forwarded request that reaches a replica not
// holding its session is refused there, marked for its sender to look
// again, never forwarded a second time; a request claiming to be
// forwarded without the peer token is refused.
func TestForwardOnlyOnce(t *testing.T) {
	rs, _ := peerCluster(t, 2)
	owner, other := rs[0], rs[1]
	if tr := owner.stream(t, fake("pid", map[string]any{"sessionId": "once", "projectId": "p"})); !tr.Result.OK {
		t.Fatal(tr.Raw)
	}
	send := func(peerToken string) *http.Response {
		req := other.request(t, t.Context(), "POST", "/stream", fake("say twice", map[string]any{"sessionId": "once", "projectId": "p"}), "application/x-ndjson")
		req.Header.Set(peer.HeaderForwarded, "replica-x")
		if peerToken != "" {
			req.Header.Set(peer.HeaderToken, peerToken)
		}
		resp, err := http.DefaultClient.Do(req)
		if err != nil {
			t.Fatal(err)
		}
		return resp
	}
	resp := send(token) // the peer token defaults to the runner token
	var rec wire.Record
	_ = json.NewDecoder(resp.Body).Decode(&rec)
	resp.Body.Close()
	if resp.Header.Get(peer.HeaderHandoff) != peer.HandoffMoved || rec.Result == nil || rec.Result.OK || !strings.Contains(rec.Result.Error, "replica-0") {
		t.Fatalf("a forwarded request for another replica's session: %d %v %+v", resp.StatusCode, resp.Header, rec.Result)
	}
	// The owner's harness saw one prompt before this one ("pid"): the
	// refused request never reached it.
	if tr := owner.stream(t, fake("history", map[string]any{"sessionId": "once", "projectId": "p"})); !strings.Contains(tr.Text(), "history 1: pid") {
		t.Fatalf("a forwarded request was forwarded again: %s", tr.Text())
	}
	for _, tok := range []string{"", "not-the-peer-token-0123"} {
		if resp := send(tok); resp.StatusCode != http.StatusForbidden {
			t.Errorf("forwarded with peer token %q: %d, want 403", tok, resp.StatusCode)
		}
	}
}

// TestAttackForgedPeerRow: a lease and a registry row forged in the
// shared store point a session at an address outside the peer networks
// (the cloud metadata endpoint). Must hold: the replica refuses the dial
// (checked on the address dialled), the turn fails naming
// AGENTA_RUNNER_PEER_CIDRS, and the replica is no proxy to that address.
func TestAttackForgedPeerRow(t *testing.T) {
	rs, url := peerCluster(t, 1)
	st, err := postgres.Open(t.Context(), url)
	if err != nil {
		t.Fatal(err)
	}
	defer st.Close()
	now := time.Now()
	if _, err := st.AcquireLease(t.Context(), store.SessionKey{ProjectID: "p", SessionID: "forged"}, "ghost", now, time.Hour); err != nil {
		t.Fatal(err)
	}
	if _, err := st.PutReplica(t.Context(), store.Replica{ID: "ghost", AdvertiseURL: "http://169.254.169.254:80", StartedAt: now, HeartbeatAt: now.Add(time.Hour)}); err != nil {
		t.Fatal(err)
	}
	tr := rs[0].stream(t, fake("say hi", map[string]any{"sessionId": "forged", "projectId": "p"}))
	if tr.Result.OK || !strings.Contains(tr.Result.Error, "AGENTA_RUNNER_PEER_CIDRS") || !strings.Contains(tr.Result.Error, "not a peer address") {
		t.Fatalf("a forged row's address: %d %+v", tr.Status, tr.Result)
	}
}

// TestForwardDrainHandsOff: the replica holding a warm session gets
// SIGTERM while another of its turns is still running (so it stays
// draining). Must hold: the warm session's next turn, sent to another
// replica, is not refused: the draining owner hands it off and it runs
// there, cold, with the conversation intact; the owner's running turn
// finishes.
func TestForwardDrainHandsOff(t *testing.T) {
	rs, _ := peerCluster(t, 2, "AGENTA_RUNNER_SHUTDOWN_TIMEOUT_MS=60000")
	owner, other := rs[0], rs[1]
	warm := owner.stream(t, fake("pid\nsay the password is swordfish", map[string]any{"sessionId": "warm", "projectId": "p"}))
	if !warm.Result.OK {
		t.Fatal(warm.Raw)
	}
	// The busy turn runs until the test opens its gate (isolation none:
	// the harness sees the test's files), not for a fixed time that a
	// loaded machine could outlast before the handoff is tried.
	gate := filepath.Join(t.TempDir(), "gate")
	busy := "say started\nexec while [ ! -e " + gate + " ]; do sleep 0.05; done\nsay finished"
	resp := owner.do(t, t.Context(), "POST", "/stream", fake(busy, map[string]any{"sessionId": "busy", "projectId": "p"}), "application/x-ndjson")
	defer resp.Body.Close()
	sc := bufio.NewScanner(resp.Body)
	for sc.Scan() && !strings.Contains(sc.Text(), "started") {
	}
	if err := owner.cmd.Process.Signal(syscall.SIGTERM); err != nil {
		t.Fatal(err)
	}
	// Draining: not ready, its turn still running.
	for deadline := time.Now().Add(time.Minute); ; time.Sleep(50 * time.Millisecond) {
		if status, _ := owner.call(t, "GET", "/ready", nil); status == http.StatusServiceUnavailable {
			break
		}
		if time.Now().After(deadline) {
			t.Fatal("the owner never turned not ready after SIGTERM")
		}
	}
	// Not a directive: the fake harness echoes the prompt, which on a cold
	// start carries the conversation replayed.
	next := other.stream(t, fake("what is the password?", map[string]any{"sessionId": "warm", "projectId": "p"}))
	if next.Status != 200 || !next.Result.OK {
		t.Fatalf("the warm session's turn while its owner drains: %d %+v\nowner log:\n%s", next.Status, next.Result, owner.Log())
	}
	if !strings.Contains(next.Text(), "Conversation so far") || !strings.Contains(next.Text(), "swordfish") {
		t.Fatalf("want a cold resume on the other replica with the history replayed:\n%s", next.Text())
	}
	if err := os.WriteFile(gate, nil, 0o600); err != nil {
		t.Fatal(err)
	}
	var last string
	for sc.Scan() {
		last = sc.Text()
	}
	if !strings.Contains(last, `"ok":true`) {
		t.Fatalf("the draining owner's running turn ended with %q", last)
	}
}

// TestForwardOwnerGoneTakenOver: the replica holding a warm session is
// killed (SIGKILL: no drain, its lease and registry row left behind).
// Must hold: the session's next turn, sent to another replica, finds the
// owner's address refusing connections with no heartbeat since and takes
// the session over at once (not after the dead lease's 90 s), running it
// cold with the history replayed.
func TestForwardOwnerGoneTakenOver(t *testing.T) {
	rs, _ := peerCluster(t, 2)
	owner, other := rs[0], rs[1]
	if tr := owner.stream(t, fake("say the password is swordfish", map[string]any{"sessionId": "orphan", "projectId": "p"})); !tr.Result.OK {
		t.Fatal(tr.Raw)
	}
	if err := owner.cmd.Process.Kill(); err != nil {
		t.Fatal(err)
	}
	<-owner.done
	owner.cmd = nil
	next := other.stream(t, fake("what is the password?", map[string]any{"sessionId": "orphan", "projectId": "p"}))
	if next.Status != 200 || !next.Result.OK || !strings.Contains(next.Text(), "swordfish") {
		t.Fatalf("the dead owner's session on the other replica: %d %+v\n%s\nlog:\n%s", next.Status, next.Result, next.Text(), other.Log())
	}
	// Taken over, not run after the dead lease lapsed.
	if !strings.Contains(other.Log(), "took the session over") {
		t.Errorf("no takeover logged:\n%s", other.Log())
	}
}
