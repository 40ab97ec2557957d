package daytonatest

import (
	"context"
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"time"
)

// The toolbox: home dir, files and process execution inside a sandbox.

// started returns the box of a toolbox request, refusing sandboxes that
// do not run. Called with mu held.
func (s *Server) started(w http.ResponseWriter, r *http.Request) *box {
	b := s.lookup(w, r, false)
	if b == nil {
		return nil
	}
	if b.sb.State != "started" {
		apiError(w, r, http.StatusBadRequest, fmt.Sprintf("Sandbox is not running (state %s)", b.sb.State))
		return nil
	}
	return b
}

func (s *Server) homeDir(w http.ResponseWriter, r *http.Request) {
	s.mu.Lock()
	defer s.mu.Unlock()
	b := s.started(w, r)
	if b == nil {
		return
	}
	writeJSON(w, http.StatusOK, map[string]string{"dir": filepath.Join(b.root, "home")})
}

func (s *Server) toolboxRoot(w http.ResponseWriter, r *http.Request) (string, bool) {
	s.mu.Lock()
	defer s.mu.Unlock()
	b := s.started(w, r)
	if b == nil {
		return "", false
	}
	return b.root, true
}

// sandboxPath checks that a toolbox path lies in the sandbox's directory,
// which is all of the sandbox's filesystem the fake lets it touch, and
// returns the sandbox directory opened as an os.Root with the path
// relative to it. Every file operation goes through that Root, so a
// symlink a sandbox process planted (home/x -> /etc/passwd) cannot lead
// a toolbox write out to the host.
func sandboxPath(w http.ResponseWriter, r *http.Request, root string) (*os.Root, string, bool) {
	p := r.URL.Query().Get("path")
	if p == "" {
		apiError(w, r, http.StatusBadRequest, "path is required")
		return nil, "", false
	}
	p = filepath.Clean(p)
	if p != root && !strings.HasPrefix(p, root+"/") {
		apiError(w, r, http.StatusBadRequest, fmt.Sprintf("path %s is outside the sandbox", p))
		return nil, "", false
	}
	rel, err := filepath.Rel(root, p)
	if err != nil {
		apiError(w, r, http.StatusBadRequest, err.Error())
		return nil, "", false
	}
	fs, err := os.OpenRoot(root)
	if err != nil {
		apiError(w, r, http.StatusInternalServerError, err.Error())
		return nil, "", false
	}
	return fs, rel, true
}

// fsError answers a file operation's error: one that would leave the
// sandbox is a 400 naming the path, anything else status.
func fsError(w http.ResponseWriter, r *http.Request, status int, msg string, err error) {
	if strings.Contains(err.Error(), "path escapes from parent") {
		apiError(w, r, http.StatusBadRequest, fmt.Sprintf("path %s is outside the sandbox", r.URL.Query().Get("path")))
		return
	}
	if msg == "" {
		msg = err.Error()
	}
	apiError(w, r, status, msg)
}

func (s *Server) fileInfo(w http.ResponseWriter, r *http.Request) {
	root, ok := s.toolboxRoot(w, r)
	if !ok {
		return
	}
	fs, p, ok := sandboxPath(w, r, root)
	if !ok {
		return
	}
	defer fs.Close()
	fi, err := fs.Stat(p)
	if err != nil {
		fsError(w, r, http.StatusNotFound, "file not found", err)
		return
	}
	writeJSON(w, http.StatusOK, map[string]any{
		"name": fi.Name(), "size": fi.Size(), "mode": fi.Mode().String(), "isDir": fi.IsDir(),
		"modifiedAt": fi.ModTime().UTC().Format(time.RFC3339), "permissions": fmt.Sprintf("%#o", fi.Mode().Perm()),
		"owner": "daytona", "group": "daytona",
	})
}

func (s *Server) download(w http.ResponseWriter, r *http.Request) {
	root, ok := s.toolboxRoot(w, r)
	if !ok {
		return
	}
	fs, p, ok := sandboxPath(w, r, root)
	if !ok {
		return
	}
	defer fs.Close()
	f, err := fs.Open(p)
	if err != nil {
		fsError(w, r, http.StatusNotFound, "file not found", err)
		return
	}
	defer f.Close()
	w.Header().Set("Content-Type", "application/octet-stream")
	_, _ = io.Copy(w, f)
}

func (s *Server) upload(w http.ResponseWriter, r *http.Request) {
	root, ok := s.toolboxRoot(w, r)
	if !ok {
		return
	}
	fs, p, ok := sandboxPath(w, r, root)
	if !ok {
		return
	}
	defer fs.Close()
	f, _, err := r.FormFile("file")
	if err != nil {
		apiError(w, r, http.StatusBadRequest, "file: "+err.Error())
		return
	}
	defer f.Close()
	if err := fs.MkdirAll(filepath.Dir(p), 0o755); err != nil {
		fsError(w, r, http.StatusBadRequest, "", err)
		return
	}
	out, err := fs.Create(p)
	if err == nil {
		_, err = io.Copy(out, f)
		if cerr := out.Close(); err == nil {
			err = cerr
		}
	}
	if err != nil {
		fsError(w, r, http.StatusBadRequest, "", err)
		return
	}
	w.WriteHeader(http.StatusOK)
}

func (s *Server) folder(w http.ResponseWriter, r *http.Request) {
	root, ok := s.toolboxRoot(w, r)
	if !ok {
		return
	}
	fs, p, ok := sandboxPath(w, r, root)
	if !ok {
		return
	}
	defer fs.Close()
	mode, err := strconv.ParseUint(r.URL.Query().Get("mode"), 8, 32)
	if err != nil {
		mode = 0o755
	}
	if err := fs.MkdirAll(p, os.FileMode(mode)); err != nil {
		fsError(w, r, http.StatusBadRequest, "", err)
		return
	}
	w.WriteHeader(http.StatusCreated)
}

func (s *Server) session(w http.ResponseWriter, r *http.Request) {
	var req struct {
		SessionID string `json:"sessionId"`
	}
	if err := json.NewDecoder(r.Body).Decode(&req); err != nil || req.SessionID == "" {
		apiError(w, r, http.StatusBadRequest, "sessionId is required")
		return
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	b := s.started(w, r)
	if b == nil {
		return
	}
	if _, ok := b.sessions[req.SessionID]; ok {
		apiError(w, r, http.StatusConflict, "session already exists")
		return
	}
	b.sessions[req.SessionID] = map[string]*command{}
	w.WriteHeader(http.StatusCreated)
}

// environ is the environment of a sandbox's processes.
func (s *Server) environ(b *box) []string {
	home := filepath.Join(b.root, "home")
	return []string{
		"HOME=" + home,
		"PATH=" + os.Getenv("PATH"),
		"RUNNER_SANDBOXD_LISTEN=127.0.0.1:0",
		// The daemon is often a race-instrumented test binary, which
		// otherwise sleeps a second at every exit.
		"GORACE=atexit_sleep_ms=0",
	}
}

// run runs command with sh in the sandbox and returns its outcome.
func (s *Server) run(ctx context.Context, b *box, command string, timeout time.Duration) (stdout, stderr string, code int) {
	s.mu.Lock()
	env, dir := s.environ(b), filepath.Join(b.root, "home")
	bt, err := s.bootOf(b)
	s.mu.Unlock()
	if err != nil {
		return "", err.Error(), -1
	}
	ctx, cancel := context.WithTimeout(ctx, timeout)
	defer cancel()
	cmd := bt.command(ctx, dir, env, "sh", "-c", command)
	var out, errb strings.Builder
	cmd.Stdout, cmd.Stderr = &out, &errb
	// A daemon that escapes into the background must not hold this
	// request open through inherited pipes.
	cmd.WaitDelay = time.Second
	err = cmd.Run()
	code = 0
	if err != nil {
		code = -1
		if ee, ok := err.(*exec.ExitError); ok {
			code = ee.ExitCode()
		}
		errb.WriteString(err.Error())
	}
	return out.String(), errb.String(), code
}

func (s *Server) exec(w http.ResponseWriter, r *http.Request) {
	var req struct {
		Command  string `json:"command"`
		RunAsync bool   `json:"runAsync"`
		Async    bool   `json:"async"`
	}
	if err := json.NewDecoder(r.Body).Decode(&req); err != nil || req.Command == "" {
		apiError(w, r, http.StatusBadRequest, "command is required")
		return
	}
	s.mu.Lock()
	b := s.started(w, r)
	if b == nil {
		s.mu.Unlock()
		return
	}
	cmds, ok := b.sessions[r.PathValue("sid")]
	if !ok {
		s.mu.Unlock()
		apiError(w, r, http.StatusNotFound, "session not found")
		return
	}
	c := &command{ID: newUUID(), Command: req.Command}
	cmds[c.ID] = c
	s.mu.Unlock()
	if req.RunAsync || req.Async {
		// Not needed by the runner; run it detached from the request.
		s.wg.Go(func() {
			o, e, code := s.run(s.ctx, b, req.Command, 10*time.Minute)
			s.mu.Lock()
			c.stdout, c.stderr, c.ExitCode = o, e, &code
			s.mu.Unlock()
		})
		writeJSON(w, http.StatusAccepted, map[string]any{"cmdId": c.ID})
		return
	}
	o, e, code := s.run(r.Context(), b, req.Command, 2*time.Minute)
	s.mu.Lock()
	c.stdout, c.stderr, c.ExitCode = o, e, &code
	s.mu.Unlock()
	writeJSON(w, http.StatusOK, map[string]any{"cmdId": c.ID, "exitCode": code, "output": o + e, "stdout": o, "stderr": e})
}

func (s *Server) findCommand(w http.ResponseWriter, r *http.Request) *command {
	b := s.started(w, r)
	if b == nil {
		return nil
	}
	c := b.sessions[r.PathValue("sid")][r.PathValue("cid")]
	if c == nil {
		apiError(w, r, http.StatusNotFound, "command not found")
	}
	return c
}

func (s *Server) commandStatus(w http.ResponseWriter, r *http.Request) {
	s.mu.Lock()
	defer s.mu.Unlock()
	if c := s.findCommand(w, r); c != nil {
		writeJSON(w, http.StatusOK, c)
	}
}

func (s *Server) commandLogs(w http.ResponseWriter, r *http.Request) {
	s.mu.Lock()
	defer s.mu.Unlock()
	c := s.findCommand(w, r)
	if c == nil {
		return
	}
	// JSON for SDK versions from 0.167.0 on, plain combined text before.
	if r.Header.Get("X-Daytona-SDK-Version") != "" {
		writeJSON(w, http.StatusOK, map[string]string{"output": c.stdout + c.stderr, "stdout": c.stdout, "stderr": c.stderr})
		return
	}
	w.Header().Set("Content-Type", "text/plain")
	_, _ = io.WriteString(w, c.stdout+c.stderr)
}

func (s *Server) execute(w http.ResponseWriter, r *http.Request) {
	var req struct {
		Command string `json:"command"`
		Timeout int    `json:"timeout"`
	}
	if err := json.NewDecoder(r.Body).Decode(&req); err != nil || req.Command == "" {
		apiError(w, r, http.StatusBadRequest, "command is required")
		return
	}
	argv := splitCommand(req.Command)
	if len(argv) == 0 {
		apiError(w, r, http.StatusBadRequest, "empty command")
		return
	}
	timeout := 360 * time.Second
	if req.Timeout > 0 {
		timeout = time.Duration(req.Timeout) * time.Second
	}
	s.mu.Lock()
	b := s.started(w, r)
	var env []string
	var dir string
	var bt *boot
	var err error
	if b != nil {
		env, dir = s.environ(b), filepath.Join(b.root, "home")
		bt, err = s.bootOf(b)
	}
	s.mu.Unlock()
	if b == nil {
		return
	}
	if err != nil {
		apiError(w, r, http.StatusInternalServerError, err.Error())
		return
	}
	ctx, cancel := context.WithTimeout(r.Context(), timeout)
	defer cancel()
	// Like the real toolbox: no shell, the words as split above, and the
	// combined output.
	cmd := bt.command(ctx, dir, env, argv[0], argv[1:]...)
	cmd.WaitDelay = time.Second
	out, err := cmd.CombinedOutput()
	code := 0
	if err != nil {
		if ctx.Err() != nil && r.Context().Err() == nil {
			apiError(w, r, http.StatusRequestTimeout, "command execution timeout")
			return
		}
		code = -1
		if ee, ok := err.(*exec.ExitError); ok {
			code = ee.ExitCode()
		}
	}
	writeJSON(w, http.StatusOK, map[string]any{"exitCode": code, "result": string(out)})
}

// splitCommand splits like the toolbox's parseCommand: spaces separate
// words, a single- or double-quoted run groups, and the other quote
// inside a quoted run is literal. No escapes, no variables.
func splitCommand(command string) []string {
	var args []string
	var cur strings.Builder
	var quote rune
	for _, r := range command {
		switch {
		case (r == '"' || r == '\'') && quote == 0:
			quote = r
		case r == quote:
			quote = 0
		case r == ' ' && quote == 0:
			if cur.Len() > 0 {
				args = append(args, cur.String())
				cur.Reset()
			}
		default:
			cur.WriteRune(r)
		}
	}
	if cur.Len() > 0 {
		args = append(args, cur.String())
	}
	return args
}
