package client

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net/http"
	"net/url"
	"strconv"
	"strings"
	"sync"
	"time"

	"github.com/agentrunner/runner/internal/errdefs"
	"github.com/agentrunner/runner/internal/sandbox"
	"github.com/agentrunner/runner/internal/sandboxd"
)

// idleLimit is how long a stream may stay silent (no event, no heartbeat)
// before the reader assumes the connection is dead and reconnects: three
// missed heartbeats. With the client's Gone check on the reconnect, a
// sandbox that vanished under a stream is known within about 4 s.
const idleLimit = 3 * sandboxd.DefaultHeartbeat

// Process is a process (or an accepted channel) in the daemon, seen from
// the runner. It implements sandbox.Process.
type Process struct {
	c         *Client
	id        string
	waitDelay time.Duration
	stopWatch func() bool // detaches the Start ctx's kill

	ctx    context.Context // lives until Wait finished; cancels every request
	cancel context.CancelFunc

	stdin  *stdinWriter
	stdout *eventReader

	waitOnce sync.Once
	waitErr  error
	killOnce sync.Once
	killErr  error

	// mu guards the following.
	mu     sync.Mutex
	tail   string // once done
	done   bool
	killed bool
}

var _ sandbox.Process = (*Process)(nil)

func newProcess(c *Client, id string, waitDelay time.Duration) *Process {
	if waitDelay <= 0 {
		waitDelay = 5 * time.Second
	}
	ctx, cancel := context.WithCancel(context.Background())
	p := &Process{c: c, id: id, waitDelay: waitDelay, ctx: ctx, cancel: cancel, stopWatch: func() bool { return true }}
	p.stdin = &stdinWriter{p: p}
	p.stdout = &eventReader{p: p, done: make(chan struct{})}
	return p
}

// ID is the daemon's id of the process.
func (p *Process) ID() string { return p.id }

func (p *Process) path(op string) string { return "/v1/entries/" + url.PathEscape(p.id) + op }

// Stdin writes to the process's standard input; each Write is one request.
func (p *Process) Stdin() io.WriteCloser { return p.stdin }

// Stdout reads the process's standard output. A dropped connection is
// reconnected from the last event received; nothing is lost or repeated.
// It returns io.EOF after the process exited and its output was read.
func (p *Process) Stdout() io.Reader { return p.stdout }

// Kill stops the process and its children now. Idempotent.
func (p *Process) Kill() error {
	p.killOnce.Do(func() {
		p.mu.Lock()
		p.killed = true
		p.mu.Unlock()
		ctx, cancel := context.WithTimeout(context.WithoutCancel(p.ctx), 30*time.Second)
		defer cancel()
		resp, err := p.c.do(ctx, http.MethodPost, p.path("/kill"), nil, nil)
		if err != nil {
			if errors.Is(err, errdefs.ErrNotFound) {
				return // already forgotten after Wait
			}
			p.killErr = fmt.Errorf("kill %s: %w", p.id, err)
			return
		}
		resp.Body.Close()
	})
	return p.killErr
}

// StderrTail returns the last few KiB the process wrote to stderr, without
// the final newline (it is quoted in messages).
func (p *Process) StderrTail() string {
	p.mu.Lock()
	defer p.mu.Unlock()
	if p.done {
		return strings.TrimRight(p.tail, "\n")
	}
	return strings.TrimRight(p.stdout.stderrTail(), "\n")
}

// Wait waits for the process to exit, then up to the wait delay for the
// reader of Stdout to reach the end, and releases the process. A non-zero
// exit is a *sandbox.ExitError.
func (p *Process) Wait() error {
	p.waitOnce.Do(func() { p.waitErr = p.wait() })
	return p.waitErr
}

func (p *Process) wait() error {
	defer p.stopWatch()
	var wr sandboxd.WaitResponse
	for !wr.Exited {
		wr = sandboxd.WaitResponse{}
		if err := p.poll(&wr); err != nil {
			p.release()
			return fmt.Errorf("wait %s: %w", p.id, err)
		}
	}
	// After a kill, the output is being dropped anyway: no reason to wait
	// for a reader.
	p.mu.Lock()
	killed := p.killed
	p.mu.Unlock()
	if !killed {
		t := time.NewTimer(p.waitDelay)
		select {
		case <-p.stdout.done:
		case <-t.C:
		}
		t.Stop()
	}
	p.mu.Lock()
	p.tail, p.done = wr.StderrTail, true
	p.mu.Unlock()
	p.release()
	st := wr.Exit
	if st.Error != "" {
		return fmt.Errorf("process %s: %s", p.id, st.Error)
	}
	if st.Code != 0 || st.Signal != "" {
		return &sandbox.ExitError{Code: st.Code, Signal: st.Signal}
	}
	return nil
}

// waitPoll is how long one /wait long poll lasts on the daemon; the
// client gives it idleLimit more before it takes the connection for dead
// (a long poll carries no heartbeat).
const waitPoll = 25 * time.Second

// poll is one /wait long poll. It ends early, with the client's Gone
// error, once the client learns the sandbox is gone.
func (p *Process) poll(wr *sandboxd.WaitResponse) error {
	ctx, cancel := context.WithTimeout(p.ctx, waitPoll+idleLimit)
	defer cancel()
	stop := context.AfterFunc(p.c.lost, cancel)
	defer stop()
	err := p.c.getJSON(ctx, p.path("/wait"), url.Values{"timeout": {waitPoll.String()}}, wr)
	if err != nil && ctx.Err() != nil && p.ctx.Err() == nil {
		if gerr := p.c.gone(p.ctx); gerr != nil {
			return gerr
		}
		if errors.Is(ctx.Err(), context.DeadlineExceeded) {
			return nil // a silent poll: ask again (the loop does)
		}
	}
	return err
}

// release ends every request of the process and makes the daemon forget it.
func (p *Process) release() {
	p.cancel()
	ctx, cancel := context.WithTimeout(context.WithoutCancel(p.ctx), 10*time.Second)
	defer cancel()
	if resp, err := p.c.do(ctx, http.MethodDelete, p.path(""), nil, nil); err == nil {
		resp.Body.Close()
	}
}

// stdinWriter sends writes with their offset, so a retry after a lost
// answer is applied once.
type stdinWriter struct {
	p *Process

	// mu guards off and serialises writes.
	mu  sync.Mutex
	off int64
}

func (w *stdinWriter) send(data []byte, closeAfter bool) error {
	q := url.Values{"offset": {strconv.FormatInt(w.off, 10)}}
	if closeAfter {
		q.Set("close", "1")
	}
	if data == nil {
		data = []byte{}
	}
	resp, err := w.p.c.do(w.p.ctx, http.MethodPost, w.p.path("/input"), q, data)
	if err != nil {
		return fmt.Errorf("write stdin of %s: %w", w.p.id, err)
	}
	defer resp.Body.Close()
	var v struct {
		Offset int64 `json:"offset"`
	}
	if err := json.NewDecoder(resp.Body).Decode(&v); err != nil {
		return fmt.Errorf("write stdin of %s: decode: %w", w.p.id, err)
	}
	w.off = v.Offset
	return nil
}

func (w *stdinWriter) Write(b []byte) (int, error) {
	w.mu.Lock()
	defer w.mu.Unlock()
	start := w.off
	if err := w.send(b, false); err != nil {
		return int(max(0, min(w.off-start, int64(len(b))))), err
	}
	return len(b), nil
}

func (w *stdinWriter) Close() error {
	w.mu.Lock()
	defer w.mu.Unlock()
	return w.send(nil, true)
}

// eventReader turns the daemon's event stream into a byte stream. It is
// pulled by Read; no goroutine of its own.
type eventReader struct {
	p    *Process
	done chan struct{} // closed at EOF

	// Read state: used only by the goroutine calling Read.
	body       io.ReadCloser
	dec        *json.Decoder
	idle       *time.Timer
	connCancel context.CancelFunc
	buf        []byte
	seq        int64 // last event received
	ackedBytes int
	failures   int
	eof        bool
	err        error

	// mu guards tail.
	mu   sync.Mutex
	tail []byte
}

func (r *eventReader) stderrTail() string {
	r.mu.Lock()
	defer r.mu.Unlock()
	return string(r.tail)
}

func (r *eventReader) Read(b []byte) (int, error) {
	for {
		if len(r.buf) > 0 {
			n := copy(b, r.buf)
			r.buf = r.buf[n:]
			return n, nil
		}
		if r.eof {
			return 0, io.EOF
		}
		if r.err != nil {
			return 0, r.err
		}
		r.next()
	}
}

// next reads one event into the reader's state, reconnecting as needed.
func (r *eventReader) next() {
	if r.p.ctx.Err() != nil {
		// Released by Wait: the process is over, whatever was not read is
		// abandoned, as with os/exec after Wait.
		r.closeConn()
		r.finish()
		return
	}
	if r.dec == nil {
		if err := r.connect(); err != nil {
			r.closeConn()
			if r.p.ctx.Err() != nil {
				r.finish()
				return
			}
			r.err = fmt.Errorf("read stdout of %s: %w", r.p.id, err)
			return
		}
	}
	var ev sandboxd.Event
	if err := r.dec.Decode(&ev); err != nil {
		// The connection dropped or went silent: reconnect from r.seq.
		r.closeConn()
		r.failures++
		if r.failures > r.p.c.cfg.Attempts {
			r.err = errdefs.With(errdefs.ErrUnavailable, fmt.Errorf("read stdout of %s: the stream kept breaking: %w", r.p.id, err))
			return
		}
		if err := r.p.c.cfg.Sleep(r.p.ctx, backoff(r.failures)); err != nil {
			r.finish()
		}
		return
	}
	r.idle.Reset(idleLimit)
	r.failures = 0
	if ev.Seq > 0 {
		r.seq = ev.Seq
	}
	switch {
	case ev.Exit != nil:
		r.closeConn()
		r.finish()
	case ev.Stream == "stderr":
		r.mu.Lock()
		r.tail = append(r.tail, ev.Data...)
		if n := len(r.tail) - sandboxd.TailSize; n > 0 {
			r.tail = append([]byte(nil), r.tail[n:]...)
		}
		r.mu.Unlock()
		r.account(len(ev.Data))
	case ev.Stream == "stdout":
		r.buf = ev.Data
		r.account(len(ev.Data))
	}
}

// account acknowledges consumed output now and then, so the daemon can
// drop it and never stalls a steady reader.
func (r *eventReader) account(n int) {
	r.ackedBytes += n
	if r.ackedBytes < r.p.c.cfg.AckEvery {
		return
	}
	r.ackedBytes = 0
	resp, err := r.p.c.do(r.p.ctx, http.MethodPost, r.p.path("/ack"), url.Values{"seq": {strconv.FormatInt(r.seq, 10)}}, nil)
	if err == nil {
		resp.Body.Close()
	}
	// A failed ack only delays freeing the daemon's buffer; the next one
	// covers it.
}

func (r *eventReader) connect() error {
	ctx, cancel := context.WithCancel(r.p.ctx)
	q := url.Values{"after": {strconv.FormatInt(r.seq, 10)}}
	resp, err := r.p.c.do(ctx, http.MethodGet, r.p.path("/events"), q, nil)
	if err != nil {
		cancel()
		return err
	}
	r.body, r.dec, r.connCancel = resp.Body, json.NewDecoder(resp.Body), cancel
	// A watchdog rather than a read deadline: the body has none, and a
	// half-open connection would otherwise block Read forever.
	r.idle = time.AfterFunc(idleLimit, cancel)
	return nil
}

func (r *eventReader) closeConn() {
	if r.idle != nil {
		r.idle.Stop()
		r.idle = nil
	}
	if r.connCancel != nil {
		r.connCancel()
		r.connCancel = nil
	}
	if r.body != nil {
		r.body.Close()
		r.body = nil
	}
	r.dec = nil
}

func (r *eventReader) finish() {
	if !r.eof {
		r.eof = true
		close(r.done)
	}
}
