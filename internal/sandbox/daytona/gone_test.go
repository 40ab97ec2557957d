package daytona_test

import (
	"bufio"
	"context"
	"errors"
	"net/http"
	"strings"
	"testing"
	"time"

	"github.com/agentrunner/runner/internal/sandbox"
	"github.com/agentrunner/runner/internal/sandbox/daytona/daytonatest"
)

// A sandbox deleted out of band: the probe says so at once, and a process
// reading in it fails within seconds with an error naming the sandbox,
// rather than retrying the dead preview for a minute.
func TestVanishedSandboxIsGone(t *testing.T) {
	t.Parallel()
	fake := daytonatest.New(t, daytonatest.Options{})
	sb := create(t, newProvider(t, fake, nil), sandbox.Spec{})
	id := sb.Info().ID
	if err := sb.(sandbox.Prober).Probe(t.Context()); err != nil {
		t.Fatalf("probe of a live sandbox: %v", err)
	}
	proc, err := sb.Start(t.Context(), sandbox.Cmd{Path: "cat", Env: testEnv})
	if err != nil {
		t.Fatal(err)
	}
	if _, err := proc.Stdin().Write([]byte("before\n")); err != nil {
		t.Fatal(err)
	}
	rd := bufio.NewReader(proc.Stdout())
	if line, err := rd.ReadString('\n'); err != nil || line != "before\n" {
		t.Fatalf("read %q %v", line, err)
	}
	fake.Remove(id)
	ctx, cancel := context.WithTimeout(t.Context(), 10*time.Second)
	defer cancel()
	readErr := make(chan error, 1)
	go func() { _, err := rd.ReadString('\n'); readErr <- err }()
	select {
	case err := <-readErr:
		if !errors.Is(err, sandbox.ErrGone) || !strings.Contains(err.Error(), id) {
			t.Errorf("read in a deleted sandbox: %v, want ErrGone naming %s", err, id)
		}
	case <-ctx.Done():
		t.Fatal("a read in a deleted sandbox did not fail within 10 s")
	}
	if err := sb.(sandbox.Prober).Probe(ctx); !errors.Is(err, sandbox.ErrGone) || !strings.Contains(err.Error(), id) {
		t.Errorf("probe of a deleted sandbox: %v", err)
	}
	if err := sb.Destroy(ctx); err != nil {
		t.Errorf("destroy of a deleted sandbox: %v, want done (404)", err)
	}
	proc.Kill()
}

// Teardown of a sandbox in the middle of a state change: Daytona answers
// 409 "state change in progress"; the delete waits for the change and goes
// through, without an error.
func TestDestroyMidTransition(t *testing.T) {
	t.Parallel()
	fake := daytonatest.New(t, daytonatest.Options{TransitionPolls: 3})
	sb := create(t, newProvider(t, fake, nil), sandbox.Spec{})
	id := sb.Info().ID
	req, _ := http.NewRequestWithContext(t.Context(), "POST", fake.APIURL()+"/sandbox/"+id+"/stop", nil)
	req.Header.Set("Authorization", "Bearer "+fake.APIKey())
	resp, err := http.DefaultClient.Do(req)
	if err != nil || resp.StatusCode != 200 {
		t.Fatalf("stop: %v %v", resp, err)
	}
	resp.Body.Close()
	fake.ResetCalls()
	if err := sb.Destroy(t.Context()); err != nil {
		t.Fatalf("destroy mid-transition: %v", err)
	}
	if n := fake.Count("DELETE /api/sandbox/{id}"); n != 2 {
		t.Errorf("deletes: %d, want 2 (a 409, then the delete); calls %v", n, fake.Calls())
	}
	if st, ok := fake.Sandbox(id); ok && st.State != "destroying" && st.State != "destroyed" {
		t.Errorf("sandbox state %s after destroy", st.State)
	}
}
