package tenanttest

import (
	"encoding/json"
	"strings"
	"sync"
	"testing"
)

// TestFaultDiskFull: an agent writes 200 MB into its workspace. Without a
// quota that space comes from the runner's data dir, and once it is full
// every other session fails to commit ("database or disk is full"). Must
// hold: with AGENTA_RUNNER_LOCAL_DISK_MB=50 the agent's dd gets ENOSPC and
// its turn ends with the error in its output, while a second session's
// turn, run at the same time, commits: its ledger row is there.
func TestFaultDiskFull(t *testing.T) {
	needBwrap(t)
	r := start(t, "AGENTA_RUNNER_LOCAL_DISK_MB=50")
	var wg sync.WaitGroup
	var filler, other turn
	wg.Add(2)
	go func() {
		defer wg.Done()
		filler = r.stream(t, fake("exec dd if=/dev/zero of=big bs=1M count=200 2>&1; rm -f big", map[string]any{"sessionId": "filler"}))
	}()
	go func() {
		defer wg.Done()
		other = r.stream(t, fake("say still committing", map[string]any{"sessionId": "bystander"}))
	}()
	wg.Wait()
	if !strings.Contains(filler.Text(), "No space left on device") {
		t.Errorf("200 MB under a 50 MB quota did not hit ENOSPC: %s %+v", filler.Text(), filler.Result)
	}
	if !other.Result.OK {
		t.Fatalf("the other session's turn failed: %+v", other.Result)
	}
	status, body := r.call(t, "GET", "/v1/sessions/bystander", nil)
	var sess struct {
		Turns []json.RawMessage `json:"turns"`
	}
	if status != 200 || json.Unmarshal(body, &sess) != nil || len(sess.Turns) != 1 {
		t.Errorf("the other session's ledger: %d %s", status, body)
	}
	// The filler's session goes on: its next turn runs in a sandbox whose
	// disk has room again.
	again := r.stream(t, fake("exec echo fine > small && cat small", map[string]any{"sessionId": "filler"}))
	if !strings.Contains(again.Text(), "fine") {
		t.Errorf("the filler's next turn: %s %+v", again.Text(), again.Result)
	}
}
