package daytonatest

import (
	"bytes"
	"encoding/json"
	"io"
	"mime/multipart"
	"net/http"
	"os"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"testing"
)

// client drives the fake's API as the provider would.
type client struct {
	t *testing.T
	s *Server
}

func (c client) do(method, path string, body any) (int, []byte) {
	c.t.Helper()
	var rd io.Reader
	ctype := "application/json"
	switch b := body.(type) {
	case nil:
	case *bytes.Buffer:
		rd = b
	case multipartBody:
		rd, ctype = b.buf, b.ctype
	default:
		j, _ := json.Marshal(b)
		rd = bytes.NewReader(j)
	}
	req, err := http.NewRequestWithContext(c.t.Context(), method, c.s.URL+path, rd)
	if err != nil {
		c.t.Fatal(err)
	}
	req.Header.Set("Authorization", "Bearer "+c.s.APIKey())
	req.Header.Set("Content-Type", ctype)
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		c.t.Fatal(err)
	}
	defer resp.Body.Close()
	out, _ := io.ReadAll(resp.Body)
	return resp.StatusCode, out
}

// started creates a sandbox and polls it until it runs.
func (c client) started() string {
	c.t.Helper()
	code, out := c.do("POST", "/api/sandbox", map[string]any{})
	if code != 200 {
		c.t.Fatalf("create: %d %s", code, out)
	}
	var sb sandboxJSON
	_ = json.Unmarshal(out, &sb)
	c.waitState(sb.ID, "started")
	return sb.ID
}

func (c client) waitState(id, want string) {
	c.t.Helper()
	for range 20 {
		code, out := c.do("GET", "/api/sandbox/"+id, nil)
		var sb sandboxJSON
		_ = json.Unmarshal(out, &sb)
		if code == 200 && sb.State == want {
			return
		}
	}
	c.t.Fatalf("sandbox %s never reached %s", id, want)
}

// sh runs script with sh in the sandbox and returns its stdout.
func (c client) sh(id, script string) string {
	c.t.Helper()
	code, out := c.do("POST", "/toolbox/"+id+"/process/execute", map[string]any{"command": `sh -c "` + script + `"`})
	var res struct {
		ExitCode int    `json:"exitCode"`
		Result   string `json:"result"`
	}
	_ = json.Unmarshal(out, &res)
	if code != 200 || res.ExitCode != 0 {
		c.t.Fatalf("execute %q: %d %s", script, code, out)
	}
	return strings.TrimSpace(res.Result)
}

type multipartBody struct {
	buf   *bytes.Buffer
	ctype string
}

func (c client) upload(id, path, content string) (int, []byte) {
	c.t.Helper()
	var buf bytes.Buffer
	mw := multipart.NewWriter(&buf)
	fw, _ := mw.CreateFormFile("file", "f")
	_, _ = io.WriteString(fw, content)
	mw.Close()
	return c.do("POST", "/toolbox/"+id+"/files/upload?path="+path, multipartBody{&buf, mw.FormDataContentType()})
}

// A restart is a fresh pid namespace: pids start again from 1, nothing
// from before the stop runs, and the pid numbers that were in use belong
// to toolbox stand-ins now.
func TestRestartReusesPids(t *testing.T) {
	t.Parallel()
	s := New(t, Options{})
	c := client{t, s}
	id := c.started()
	old, err := strconv.Atoi(c.sh(id, "sleep 600 >/dev/null 2>&1 & echo $!"))
	if err != nil || old > 20 {
		t.Fatalf("pid of a process in a fresh sandbox = %d (%v), want a small namespace pid", old, err)
	}
	var hostPID int
	for _, p := range s.Processes(id) {
		if p.PID == old {
			hostPID = p.HostPID
		}
	}
	if hostPID == 0 || hostPID == old {
		t.Fatalf("no host pid for sandbox pid %d: %+v", old, s.Processes(id))
	}
	if code, out := c.do("POST", "/api/sandbox/"+id+"/stop", nil); code != 200 {
		t.Fatalf("stop: %d %s", code, out)
	}
	if _, err := os.Stat("/proc/" + strconv.Itoa(hostPID)); err == nil {
		t.Errorf("pid %d (host %d) survived the stop", old, hostPID)
	}
	c.waitState(id, "stopped")
	if code, out := c.do("POST", "/api/sandbox/"+id+"/start", nil); code != 200 {
		t.Fatalf("start: %d %s", code, out)
	}
	c.waitState(id, "started")
	if got := c.sh(id, "echo $$"); got == "" {
		t.Fatal("no pid after the restart")
	}
	placed, running := s.Toolbox(id)
	if !slices.Contains(placed, old) || !slices.Equal(placed, running) {
		t.Errorf("toolbox stand-ins placed at %v, running %v; want pid %d among them, all running", placed, running, old)
	}
	for _, p := range s.Processes(id) {
		if strings.Contains(p.Args, "sleep 600") {
			t.Errorf("a process from before the stop runs after the start: %+v", p)
		}
	}
}

// Deleting a sandbox while a transition is under way answers 409, as
// Daytona does; once it settles the delete goes through.
func TestDeleteMidTransition(t *testing.T) {
	t.Parallel()
	s := New(t, Options{TransitionPolls: 3})
	c := client{t, s}
	code, out := c.do("POST", "/api/sandbox", map[string]any{})
	if code != 200 {
		t.Fatalf("create: %d %s", code, out)
	}
	var sb sandboxJSON
	_ = json.Unmarshal(out, &sb)
	code, out = c.do("DELETE", "/api/sandbox/"+sb.ID, nil)
	if code != http.StatusConflict || !strings.Contains(string(out), "state change in progress") {
		t.Fatalf("delete while creating: %d %s, want 409 state change in progress", code, out)
	}
	c.waitState(sb.ID, "started")
	if code, out := c.do("DELETE", "/api/sandbox/"+sb.ID, nil); code != 200 {
		t.Fatalf("delete once started: %d %s", code, out)
	}
}

// An out-of-band delete ends the sandbox's processes and its API answers
// 404 from then on.
func TestRemoveOutOfBand(t *testing.T) {
	t.Parallel()
	s := New(t, Options{})
	c := client{t, s}
	id := c.started()
	c.sh(id, "sleep 600 >/dev/null 2>&1 &")
	procs := s.Processes(id)
	if len(procs) == 0 {
		t.Fatal("no processes in the sandbox")
	}
	s.Remove(id)
	for _, p := range procs {
		if _, err := os.Stat("/proc/" + strconv.Itoa(p.HostPID)); err == nil {
			t.Errorf("process %+v survived the delete", p)
		}
	}
	if code, _ := c.do("GET", "/api/sandbox/"+id, nil); code != http.StatusNotFound {
		t.Errorf("GET after delete: %d, want 404", code)
	}
	if code, _ := c.do("DELETE", "/api/sandbox/"+id, nil); code != http.StatusNotFound {
		t.Errorf("DELETE after delete: %d, want 404", code)
	}
}

// Toolbox file operations stay in the sandbox's directory even through a
// symlink a sandbox process planted: the host file it points at is left
// alone (a fake toolbox once truncated the host's /etc/passwd this way).
func TestFilesStayInTheSandbox(t *testing.T) {
	t.Parallel()
	s := New(t, Options{})
	c := client{t, s}
	id := c.started()
	st, _ := s.Sandbox(id)
	outside := filepath.Join(t.TempDir(), "host-file")
	if err := os.WriteFile(outside, []byte("host content"), 0o600); err != nil {
		t.Fatal(err)
	}
	c.sh(id, "ln -s "+outside+" link && ln -s "+filepath.Dir(outside)+" dirlink")
	for _, p := range []string{"home/link", "home/dirlink/host-file", "home/dirlink/new"} {
		code, out := c.upload(id, filepath.Join(st.Root, p), "overwritten")
		if code != http.StatusBadRequest || !strings.Contains(string(out), "outside the sandbox") {
			t.Errorf("upload through %s: %d %s, want 400 outside the sandbox", p, code, out)
		}
	}
	if b, _ := os.ReadFile(outside); string(b) != "host content" {
		t.Errorf("the host file now holds %q", b)
	}
	if _, err := os.Stat(filepath.Join(filepath.Dir(outside), "new")); err == nil {
		t.Error("a file was created outside the sandbox")
	}
	if code, out := c.do("GET", "/toolbox/"+id+"/files/download?path="+filepath.Join(st.Root, "home/link"), nil); code == 200 {
		t.Errorf("download through a symlink out of the sandbox: %d %s", code, out)
	}
	// Inside the sandbox, files work as before.
	if code, out := c.upload(id, filepath.Join(st.Root, "home/sub/f"), "inside"); code != 200 {
		t.Fatalf("upload inside: %d %s", code, out)
	}
	if b, _ := os.ReadFile(filepath.Join(st.Root, "home/sub/f")); string(b) != "inside" {
		t.Errorf("uploaded file holds %q", b)
	}
}
