package sandboxd

import (
	"context"
	"errors"
	"fmt"
	"io"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"sync"
	"syscall"
	"time"

	"github.com/agentrunner/runner/internal/errdefs"
)

// TailSize is how much of an entry's stderr the daemon keeps, and the
// client of its output, for StderrTail.
const TailSize = 8 << 10

// entry is one stream the daemon relays: a process or a dialed connection.
type entry struct {
	id  string
	out *eventLog

	// inMu guards the following; it also serialises writes to in.
	inMu     sync.Mutex
	in       io.WriteCloser
	inOff    int64
	inClosed bool

	killOnce sync.Once
	kill     func() // stops the entry's source; the output then ends

	done chan struct{} // closed after exit is set and the log finished
	exit ExitStatus

	tailMu sync.Mutex
	tail   []byte
}

func (e *entry) addTail(p []byte) {
	e.tailMu.Lock()
	defer e.tailMu.Unlock()
	e.tail = append(e.tail, p...)
	if n := len(e.tail) - TailSize; n > 0 {
		e.tail = append([]byte(nil), e.tail[n:]...)
	}
}

func (e *entry) stderrTail() string {
	e.tailMu.Lock()
	defer e.tailMu.Unlock()
	return string(e.tail)
}

// write applies data that starts at input offset off. Bytes before the
// entry's current offset were applied by an earlier attempt and are
// skipped, so a client may retry a write whose answer it lost.
func (e *entry) write(off int64, data []byte, closeAfter bool) (int64, error) {
	e.inMu.Lock()
	defer e.inMu.Unlock()
	if off > e.inOff {
		return e.inOff, errdefs.With(errdefs.ErrConflict, fmt.Errorf("write at offset %d leaves a gap: input is at %d", off, e.inOff))
	}
	skip := e.inOff - off
	if skip < int64(len(data)) {
		if e.inClosed {
			return e.inOff, errdefs.With(errdefs.ErrConflict, errors.New("input is closed"))
		}
		n, err := e.in.Write(data[skip:])
		e.inOff += int64(n)
		if err != nil {
			return e.inOff, errdefs.With(errdefs.ErrConflict, fmt.Errorf("write input: %w", err))
		}
	}
	if closeAfter && !e.inClosed {
		e.inClosed = true
		if err := e.in.Close(); err != nil {
			return e.inOff, fmt.Errorf("close input: %w", err)
		}
	}
	return e.inOff, nil
}

func (e *entry) stop() {
	e.killOnce.Do(func() {
		e.out.abort()
		select {
		case <-e.done:
			// Ended and reaped: its process group id may belong to
			// someone else by now.
		default:
			e.kill()
		}
	})
}

// StartRequest is the body of POST /v1/processes.
type StartRequest struct {
	// ID, when set, makes the start idempotent: a second start with the
	// same ID returns the first process. Clients set it so that a start
	// whose answer was lost can be retried.
	ID   string   `json:"id,omitempty"`
	Argv []string `json:"argv"`
	Env  []string `json:"env,omitempty"`
	Dir  string   `json:"dir,omitempty"`
}

// StartResponse is the answer to POST /v1/processes.
type StartResponse struct {
	ID  string `json:"id"`
	PID int    `json:"pid"`
}

// startProcess runs req and returns its entry; wg owns the goroutines that
// relay its output and wait for it.
func startProcess(id string, req StartRequest, workdir string, maxBuf int, wg *sync.WaitGroup) (*entry, int, error) {
	if len(req.Argv) == 0 || req.Argv[0] == "" {
		return nil, 0, errdefs.Invalidf("argv is empty")
	}
	path, err := lookPath(req.Argv[0], req.Env)
	if err != nil {
		return nil, 0, errdefs.With(errdefs.ErrInvalid, err)
	}
	dir := req.Dir
	if dir == "" {
		dir = workdir
	}
	// Our own pipes rather than StdoutPipe: cmd.Wait closes those as soon as
	// the process exits, and we must read to the end first.
	var files []*os.File // every end, closed on failure
	closeAll := func() {
		for _, f := range files {
			f.Close()
		}
	}
	pipe := func() (r, w *os.File, err error) {
		if r, w, err = os.Pipe(); err == nil {
			files = append(files, r, w)
		}
		return r, w, err
	}
	inR, inW, err := pipe()
	if err != nil {
		return nil, 0, err
	}
	outR, outW, err := pipe()
	if err != nil {
		closeAll()
		return nil, 0, err
	}
	errR, errW, err := pipe()
	if err != nil {
		closeAll()
		return nil, 0, err
	}
	var cmd *exec.Cmd
	for attempt := 0; ; attempt++ {
		cmd = &exec.Cmd{
			Path: path, Args: req.Argv, Env: req.Env, Dir: dir,
			Stdin: inR, Stdout: outW, Stderr: errW,
			// A group of its own, so kill reaches the children a harness spawns.
			SysProcAttr: &syscall.SysProcAttr{Setpgid: true},
		}
		if cmd.Env == nil {
			cmd.Env = []string{}
		}
		err = cmd.Start()
		// A program written just now (WriteFile, then Start) can fail with
		// ETXTBSY while a process forked at that moment still holds the
		// writer's descriptor (golang.org/issue/22315); it passes quickly.
		if !errors.Is(err, syscall.ETXTBSY) || attempt == 10 {
			break
		}
		time.Sleep(20 * time.Millisecond)
	}
	if err != nil {
		closeAll()
		return nil, 0, errdefs.With(errdefs.ErrInvalid, fmt.Errorf("start %s: %w", req.Argv[0], err))
	}
	stdin := inW
	inR.Close()
	outW.Close()
	errW.Close()
	pid := cmd.Process.Pid
	e := &entry{id: id, out: newEventLog(maxBuf), in: stdin, done: make(chan struct{})}
	e.kill = func() { _ = syscall.Kill(-pid, syscall.SIGKILL) }

	ctx, cancel := context.WithCancel(context.Background())
	var pumps sync.WaitGroup
	pumps.Go(func() { pump(ctx, e, "stdout", outR) })
	pumps.Go(func() { pump(ctx, e, "stderr", errR) })
	wg.Go(func() {
		defer cancel()
		werr := cmd.Wait()
		// Children may hold the pipes open after the leader exits; give them
		// a moment to finish writing, then take the group down so the pipes
		// close and the log can end.
		pumpsDone := make(chan struct{})
		go func() { pumps.Wait(); close(pumpsDone) }()
		select {
		case <-pumpsDone:
		case <-time.After(2 * time.Second):
			_ = syscall.Kill(-pid, syscall.SIGKILL)
			outR.Close()
			errR.Close()
			<-pumpsDone
		}
		outR.Close()
		errR.Close()
		e.exit = exitStatus(cmd.ProcessState, werr)
		e.out.finish(e.exit)
		close(e.done)
	})
	return e, pid, nil
}

// pump copies r into the entry's log until EOF or abort.
func pump(ctx context.Context, e *entry, stream string, r io.Reader) {
	buf := make([]byte, 32<<10)
	for {
		n, err := r.Read(buf)
		if n > 0 {
			// An exact copy: the log holds it until acknowledged, and its
			// bound counts lengths, not capacities.
			data := append([]byte(nil), buf[:n]...)
			if stream == "stderr" {
				e.addTail(data)
			}
			if !e.out.append(ctx, stream, data) {
				// Aborted: keep draining so the process never blocks on a full pipe.
				_, _ = io.Copy(io.Discard, r)
				return
			}
		}
		if err != nil {
			return
		}
	}
}

func exitStatus(ps *os.ProcessState, err error) ExitStatus {
	if ps == nil {
		if err != nil {
			return ExitStatus{Code: -1, Error: err.Error()}
		}
		return ExitStatus{Code: -1}
	}
	if ws, ok := ps.Sys().(syscall.WaitStatus); ok && ws.Signaled() {
		return ExitStatus{Code: -1, Signal: signalName(ws.Signal())}
	}
	return ExitStatus{Code: ps.ExitCode()}
}

func signalName(s syscall.Signal) string {
	switch s {
	case syscall.SIGKILL:
		return "SIGKILL"
	case syscall.SIGTERM:
		return "SIGTERM"
	case syscall.SIGINT:
		return "SIGINT"
	case syscall.SIGSEGV:
		return "SIGSEGV"
	case syscall.SIGABRT:
		return "SIGABRT"
	case syscall.SIGPIPE:
		return "SIGPIPE"
	case syscall.SIGHUP:
		return "SIGHUP"
	}
	return "signal " + s.String()
}

// lookPath resolves name against the PATH in env, not the daemon's own:
// the process runs with exactly the environment the runner sent.
func lookPath(name string, env []string) (string, error) {
	if strings.Contains(name, "/") {
		return name, nil
	}
	path := "/usr/local/bin:/usr/bin:/bin"
	for _, kv := range env {
		if v, ok := strings.CutPrefix(kv, "PATH="); ok {
			path = v
		}
	}
	for _, dir := range filepath.SplitList(path) {
		if dir == "" {
			dir = "."
		}
		p := filepath.Join(dir, name)
		if fi, err := os.Stat(p); err == nil && fi.Mode().IsRegular() && fi.Mode()&0o111 != 0 {
			return p, nil
		}
	}
	return "", fmt.Errorf("%s: not found in PATH %q", name, path)
}
