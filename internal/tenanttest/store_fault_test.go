package tenanttest

import (
	"encoding/json"
	"errors"
	"fmt"
	"io/fs"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/agentrunner/runner/internal/store/storetest"
)

// The store faults (issue 22): a turn is never ok:true unless it is on
// disk, the ledger converges once the store is back, /ready reflects the
// store, and a failing store does not flood the log.

// pausedTurn is a prompt whose harness stops mid-turn until the test has
// broken the store (fault), then produces n message deltas to commit.
func pausedTurn(n int) string {
	return "say before the fault\n" +
		"exec touch h7-waiting && while [ ! -e h7-go ]; do sleep 0.02; done && echo resumed\n" +
		fmt.Sprintf("flood %d\n", n)
}

// midTurn runs fault while the harness of the turn pausedTurn started
// waits, then lets it go on. It returns at once; the channel reports the
// fault's error once the harness was let go.
func midTurn(dataDir string, fault func() error) <-chan error {
	errc := make(chan error, 1)
	go func() {
		errc <- func() error {
			deadline := time.Now().Add(2 * time.Minute)
			for {
				waiting, err := findFile(dataDir, "h7-waiting")
				if err != nil {
					return err
				}
				if waiting != "" {
					ferr := fault()
					// Let the harness go even if the fault failed.
					if err := os.WriteFile(filepath.Join(filepath.Dir(waiting), "h7-go"), nil, 0o644); err != nil {
						return errors.Join(ferr, err)
					}
					return ferr
				}
				if time.Now().After(deadline) {
					return errors.New("the harness never reached the fault")
				}
				time.Sleep(10 * time.Millisecond)
			}
		}()
	}()
	return errc
}

// findFile is the path of a file named name under dir, "" if none.
func findFile(dir, name string) (string, error) {
	found := ""
	err := filepath.WalkDir(dir, func(p string, d fs.DirEntry, err error) error {
		if err != nil {
			return nil // a sandbox dir being made or removed
		}
		if d.Name() == name {
			found = p
			return fs.SkipAll
		}
		return nil
	})
	return found, err
}

// readiness is GET /ready's status and body.
func (r *runner) readiness(t *testing.T) (int, map[string]any) {
	t.Helper()
	code, b := r.call(t, "GET", "/ready", nil)
	var body map[string]any
	if err := json.Unmarshal(b, &body); err != nil {
		t.Fatalf("/ready: %v: %s", err, b)
	}
	return code, body
}

// awaitReady polls /ready until it is 200.
func (r *runner) awaitReady(t *testing.T) {
	t.Helper()
	deadline := time.Now().Add(time.Minute)
	for {
		code, body := r.readiness(t)
		if code == 200 {
			return
		}
		if time.Now().After(deadline) {
			t.Fatalf("/ready never became 200 again: %d %v\n%s", code, body, r.Log())
		}
		time.Sleep(20 * time.Millisecond)
	}
}

// settledTurns polls the session's ledger until no turn is running, and
// returns the statuses.
func (r *runner) settledTurns(t *testing.T, session string) []string {
	t.Helper()
	deadline := time.Now().Add(time.Minute)
	for {
		code, b := r.call(t, "GET", "/v1/sessions/"+session, nil)
		var v struct {
			Turns []struct {
				Status string `json:"status"`
				Error  string `json:"error"`
			} `json:"turns"`
		}
		running := code != 200
		var statuses []string
		if code == 200 {
			if err := json.Unmarshal(b, &v); err != nil {
				t.Fatal(err)
			}
			for _, tr := range v.Turns {
				statuses = append(statuses, tr.Status)
				running = running || tr.Status == "running"
			}
		}
		if !running {
			return statuses
		}
		if time.Now().After(deadline) {
			t.Fatalf("the ledger still shows a turn running a minute after the store came back: %d %s\n%s", code, b, r.Log())
		}
		time.Sleep(20 * time.Millisecond)
	}
}

// wantUnready fails t unless /ready is 503 naming the store.
func (r *runner) wantUnready(t *testing.T, cause string) {
	t.Helper()
	code, body := r.readiness(t)
	if code != 503 || body["status"] != "store_unwritable" || !strings.Contains(fmt.Sprint(body["error"]), cause) {
		t.Fatalf("/ready = %d %v while the store cannot be written, want 503 store_unwritable naming %q", code, body, cause)
	}
}

// wantFailed fails t unless the turn's result is ok:false naming the
// store and cause, its done event an error.
func wantFailed(t *testing.T, tr turn, store, cause string) {
	t.Helper()
	if tr.Result.OK || !strings.Contains(tr.Result.Error, store) || !strings.Contains(tr.Result.Error, cause) {
		t.Fatalf("turn = ok:%v error %q with the store failing, want ok:false naming %q and %q", tr.Result.OK, tr.Result.Error, store, cause)
	}
	for _, e := range tr.Events {
		if e.Type == "done" && e.StopReason != "error" {
			t.Fatalf("done event says %q for a turn that is not on disk", e.StopReason)
		}
	}
}

// logLine matches a warning or error of the runner's text log.
var logLine = regexp.MustCompile(`level=(WARN|ERROR) msg=("[^"]*"|\S+)`)

// wantQuietLog fails t if one warning or error message makes up more
// than a handful of lines of log.
func wantQuietLog(t *testing.T, log string) {
	t.Helper()
	n := map[string]int{}
	for _, l := range strings.Split(log, "\n") {
		if m := logLine.FindStringSubmatch(l); m != nil {
			n[m[2]]++
		}
	}
	for msg, c := range n {
		if c > 5 {
			t.Errorf("%s logged %d times", msg, c)
		}
	}
}

// TestFaultSQLiteDiskFull: the data dir is a small tmpfs the test fills
// while the turn runs, so the turn's events cannot be committed. The turn
// must end ok:false naming the SQLite store and the cause, /ready must be
// 503 store_unwritable until space is freed and 200 after, the ledger
// must then show the turn failed or interrupted, never running, and the
// failing writes must not flood the log.
func TestFaultSQLiteDiskFull(t *testing.T) {
	needBwrap(t)
	if os.Geteuid() != 0 {
		t.Skip("mounting a tmpfs needs root")
	}
	dataDir := filepath.Join(t.TempDir(), "data")
	if err := os.MkdirAll(dataDir, 0o700); err != nil {
		t.Fatal(err)
	}
	if out, err := exec.Command("mount", "-t", "tmpfs", "-o", "size=48m", "tmpfs", dataDir).CombinedOutput(); err != nil {
		t.Skipf("mount a tmpfs: %v: %s", err, out)
	}
	t.Cleanup(func() { _ = exec.Command("umount", "-l", dataDir).Run() })
	// No sandbox disk quota or reserve on this 48 MiB data dir: the store
	// filling it is the fault under test, not the sandboxes' room.
	r := start(t, "AGENTA_RUNNER_DATA_DIR="+dataDir, "AGENTA_RUNNER_STORE_URL=off", "AGENTA_RUNNER_STORE_PROBE_INTERVAL_MS=100", "AGENTA_RUNNER_LOCAL_DISK_MB=0", "AGENTA_RUNNER_DISK_RESERVE_MB=0")

	fill := filepath.Join(dataDir, "fill")
	errc := midTurn(dataDir, func() error { return fillUp(fill) })
	tr := r.stream(t, fake(pausedTurn(5000), map[string]any{"sessionId": "full"}))
	if err := <-errc; err != nil {
		t.Fatal(err)
	}
	wantFailed(t, tr, "SQLite store", "full")
	r.wantUnready(t, "full")

	if err := os.Remove(fill); err != nil {
		t.Fatal(err)
	}
	r.wantRecovered(t, "full")
}

// wantRecovered fails t unless, the store being back, /ready turns 200,
// the session's ledger shows its turns failed or interrupted, and the log
// (once the runner stopped and wrote its counts) was not flooded.
func (r *runner) wantRecovered(t *testing.T, session string) {
	t.Helper()
	r.awaitReady(t)
	for _, s := range r.settledTurns(t, session) {
		if s != "failed" && s != "interrupted" {
			t.Fatalf("the ledger shows the turn %s", s)
		}
	}
	r.stop(t)
	wantQuietLog(t, r.Log())
}

// fillUp writes path until the filesystem is full.
func fillUp(path string) error {
	f, err := os.Create(path)
	if err != nil {
		return err
	}
	defer f.Close()
	buf := make([]byte, 1<<20)
	for {
		if _, err := f.Write(buf); err != nil {
			if errors.Is(err, syscall.ENOSPC) {
				return nil
			}
			return err
		}
	}
}

// TestFaultSQLiteImmutable: the SQLite files are made immutable (chattr
// +i) while the turn runs. The turn must end ok:false naming the store,
// /ready must be 503 until the files are writable again and 200 after,
// and the ledger must then hold the turn's outcome.
func TestFaultSQLiteImmutable(t *testing.T) {
	needBwrap(t)
	r := start(t, "AGENTA_RUNNER_STORE_URL=off", "AGENTA_RUNNER_STORE_PROBE_INTERVAL_MS=100")
	// The database and its write-ahead log; not the -shm index, which
	// SQLite maps into memory: a race-built runner dies of the fault of
	// touching a mapped page of an immutable file inside the SQLite
	// driver (a plain build does not), which is not what this attacks.
	dbFiles := func() []string {
		return []string{filepath.Join(r.DataDir, "runner.db"), filepath.Join(r.DataDir, "runner.db-wal")}
	}
	t.Cleanup(func() { _ = exec.Command("chattr", append([]string{"-i"}, dbFiles()...)...).Run() })
	var unsupported error
	errc := midTurn(r.DataDir, func() error {
		if out, err := exec.Command("chattr", append([]string{"+i"}, dbFiles()...)...).CombinedOutput(); err != nil {
			unsupported = fmt.Errorf("chattr +i: %v: %s", err, out)
		}
		return nil
	})
	tr := r.stream(t, fake(pausedTurn(10), map[string]any{"sessionId": "immutable"}))
	if err := <-errc; err != nil {
		t.Fatal(err)
	}
	if unsupported != nil {
		t.Skipf("the data dir's filesystem cannot make files immutable: %v", unsupported)
	}
	wantFailed(t, tr, "SQLite store", "disk I/O error")
	r.wantUnready(t, "SQLite store")
	// A one-shot turn meanwhile: a 503 naming the store.
	if code, body := r.call(t, "POST", "/run", fake("say hi", map[string]any{"sessionId": "immutable-2"})); code != 503 || !strings.Contains(string(body), "SQLite store") {
		t.Fatalf("/run while the store cannot be written = %d %s, want 503 naming the store", code, body)
	}

	if out, err := exec.Command("chattr", append([]string{"-i"}, dbFiles()...)...).CombinedOutput(); err != nil {
		t.Fatalf("chattr -i: %v: %s", err, out)
	}
	r.wantRecovered(t, "immutable")
}

// TestFaultPostgresReset: the connection to PostgreSQL is reset under
// the turn's commit. The turn must end ok:false naming the store and the
// error, not ok:true with its events lost, and the ledger must then hold
// its outcome.
func TestFaultPostgresReset(t *testing.T) {
	needBwrap(t)
	proxy, dsn := storetest.ProxiedSchema(t)
	// No periodic probe: the reset goes to the turn's commit.
	// No job queue either: River's polls would take the reset.
	r := start(t, "AGENTA_RUNNER_DATABASE_URL="+dsn, "AGENTA_RUNNER_STORE_URL=off", "AGENTA_RUNNER_STORE_PROBE_INTERVAL_MS=600000",
		"AGENTA_RUNNER_JOBS=off")
	errc := midTurn(r.DataDir, func() error { proxy.ResetNext(); return nil })
	tr := r.stream(t, fake(pausedTurn(200), map[string]any{"sessionId": "reset"}))
	if err := <-errc; err != nil {
		t.Fatal(err)
	}
	wantFailed(t, tr, "PostgreSQL store", "did not record the turn")
	r.wantRecovered(t, "reset")
}

// TestFaultPostgresStalled: PostgreSQL stops answering mid-turn, its
// connections kept open. The turn must fail within the statement timeout
// (1 s here) with an error saying so, and /ready must be 503.
func TestFaultPostgresStalled(t *testing.T) {
	needBwrap(t)
	proxy, dsn := storetest.ProxiedSchema(t)
	// The stop after the test bounds each half of the shutdown (drain,
	// then the teardown) by 5 s, well inside stop's 30 s with the store
	// still stalled: the job queue must not wait for River's own
	// deadlines (its resignation, its completer's retries).
	r := start(t, "AGENTA_RUNNER_DATABASE_URL="+dsn, "AGENTA_RUNNER_STORE_URL=off",
		"AGENTA_RUNNER_DATABASE_STATEMENT_TIMEOUT_MS=1000", "AGENTA_RUNNER_DATABASE_CONNECT_TIMEOUT_MS=1000",
		"AGENTA_RUNNER_SHUTDOWN_TIMEOUT_MS=5000")
	errc := midTurn(r.DataDir, func() error { proxy.Stall(); return nil })
	tr := r.stream(t, fake(pausedTurn(200), map[string]any{"sessionId": "stalled"}))
	if err := <-errc; err != nil {
		t.Fatal(err)
	}
	wantFailed(t, tr, "PostgreSQL store", "PostgreSQL did not answer within 1s (AGENTA_RUNNER_DATABASE_STATEMENT_TIMEOUT_MS)")
	r.wantUnready(t, "PostgreSQL store")
}
