package tenanttest

import (
	"fmt"
	"strconv"
	"strings"
	"testing"
)

// TestForwardStaleKeepAlive: two `runner serve` replicas; the owner is
// reached through a TCP proxy that closes the forwarder's kept-alive
// connection as the next forwarded turn arrives on it, unforwarded (what
// an owner closing an idle connection, AGENTA_RUNNER_HTTP_IDLE_TIMEOUT_MS,
// or shutting down looks like to the forwarder, made certain). Must hold:
// that turn succeeds, on the owner's warm harness (same process), which
// saw each prompt once.
func TestForwardStaleKeepAlive(t *testing.T) {
	rs, url := peerCluster(t, 1)
	other := rs[0]
	web := newTCPProxy(t, "")
	owner := start(t, append(replicaEnv(url, 1), "AGENTA_RUNNER_ADVERTISE_URL=http://"+web.Addr)...)
	web.SetTarget(strings.TrimPrefix(owner.Base, "http://"))
	fields := map[string]any{"sessionId": "stale", "projectId": "p"}
	var pid string
	for i, r := range []*runner{owner, other, other} {
		if i == 2 {
			web.DropIdle()
		}
		tr := r.stream(t, fake(fmt.Sprintf("pid\nhistory\nsay turn %d", i), fields))
		if tr.Status != 200 || !tr.Result.OK {
			t.Fatalf("turn %d on %s: %d %+v\n%s\nforwarder's log:\n%s", i, r.Base, tr.Status, tr.Result, tr.Raw, other.Log())
		}
		if i == 0 {
			pid = pidOf(tr)
		}
		if got := pidOf(tr); got == "" || got != pid {
			t.Fatalf("turn %d reached harness pid %q, the session's is %q: not the warm harness", i, got, pid)
		}
		if m := historyLine.FindStringSubmatch(tr.Text()); m == nil || m[1] != strconv.Itoa(i) {
			t.Fatalf("turn %d: the harness remembers %v prompts, want %d (a prompt sent twice?)\n%s", i, m, i, tr.Text())
		}
	}
}
