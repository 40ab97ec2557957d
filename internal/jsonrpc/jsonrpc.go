// Package jsonrpc is a bidirectional JSON-RPC 2.0 connection over
// newline-delimited JSON, the framing ACP uses on stdio. Either side can
// call the other. Notifications are handled in arrival order on the reader
// goroutine, so a response is delivered only after every notification sent
// before it; requests from the peer run on their own goroutines, so a slow
// answer (a permission waiting for a human) never stalls the stream.
package jsonrpc

import (
	"bufio"
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"strconv"
	"sync"
)

// Standard and ACP error codes.
const (
	CodeParse          = -32700
	CodeInvalidRequest = -32600
	CodeMethodNotFound = -32601
	CodeInvalidParams  = -32602
	CodeInternal       = -32603
	CodeCancelled      = -32800
	CodeAuthRequired   = -32000
)

// DefaultMaxLine caps one message the peer sends unless WithMaxLine sets
// another cap; a harness replaying a long transcript can send large
// lines, but not unbounded ones.
const DefaultMaxLine = 8 << 20

// MaxInflight bounds the peer's requests served at once (each holds a
// goroutine, and a permission request may wait for a person): past it a
// request is answered at once with an error, whatever the peer sends.
const MaxInflight = 256

// ErrLineTooLong ends a connection whose peer sent a line over its cap:
// the line cannot be read in part, and skipping it could lose a response.
var ErrLineTooLong = errors.New("line too long")

// Option configures a Conn.
type Option func(*Conn)

// WithMaxLine caps one message the peer sends at n bytes (n > 0).
func WithMaxLine(n int) Option {
	return func(c *Conn) {
		if n > 0 {
			c.maxLine = n
		}
	}
}

// Error is a JSON-RPC error object.
type Error struct {
	Code    int             `json:"code"`
	Message string          `json:"message"`
	Data    json.RawMessage `json:"data,omitempty"`
}

func (e *Error) Error() string {
	if len(e.Data) > 0 && string(e.Data) != "null" {
		return fmt.Sprintf("%s (code %d): %s", e.Message, e.Code, e.Data)
	}
	return fmt.Sprintf("%s (code %d)", e.Message, e.Code)
}

// Handler answers the peer. For a notification its result is ignored.
// Returning an *Error sends that error; any other error becomes CodeInternal.
type Handler interface {
	Handle(ctx context.Context, method string, params json.RawMessage, notify bool) (any, error)
}

// HandlerFunc adapts a function to Handler.
type HandlerFunc func(ctx context.Context, method string, params json.RawMessage, notify bool) (any, error)

// Handle implements Handler.
func (f HandlerFunc) Handle(ctx context.Context, method string, params json.RawMessage, notify bool) (any, error) {
	return f(ctx, method, params, notify)
}

type message struct {
	JSONRPC string          `json:"jsonrpc"`
	ID      json.RawMessage `json:"id,omitempty"`
	Method  string          `json:"method,omitempty"`
	Params  json.RawMessage `json:"params,omitempty"`
	Result  json.RawMessage `json:"result,omitempty"`
	Error   *Error          `json:"error,omitempty"`
}

type response struct {
	result json.RawMessage
	err    *Error
}

// ErrClosed is returned by calls on a connection whose peer went away.
var ErrClosed = errors.New("connection closed")

// Conn is one JSON-RPC connection.
type Conn struct {
	w       io.Writer
	handler Handler
	maxLine int
	ctx     context.Context
	cancel  context.CancelFunc
	done    chan struct{}
	wg      sync.WaitGroup

	wmu sync.Mutex // serialises writes of whole lines

	// mu guards the following.
	mu       sync.Mutex
	nextID   int64
	pending  map[string]chan response
	err      error
	inflight int // the peer's requests being served
}

// New starts reading r in a goroutine owned by the Conn; Close (or the end
// of r) stops it.
func New(r io.Reader, w io.Writer, h Handler, opts ...Option) *Conn {
	ctx, cancel := context.WithCancel(context.Background())
	c := &Conn{w: w, handler: h, maxLine: DefaultMaxLine, ctx: ctx, cancel: cancel, done: make(chan struct{}), pending: map[string]chan response{}}
	for _, o := range opts {
		o(c)
	}
	c.wg.Add(1)
	go c.read(r)
	return c
}

// Done is closed when the peer's stream ends.
func (c *Conn) Done() <-chan struct{} { return c.done }

// Err is why the stream ended (nil while it runs, io.EOF on a clean end).
func (c *Conn) Err() error {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.err
}

// Close stops handlers' contexts and waits for the reader and handlers to
// return. The reader returns once r ends, so close the peer's stream first.
func (c *Conn) Close() {
	c.cancel()
	c.wg.Wait()
}

// Call sends a request and waits for its response. Cancelling ctx stops the
// wait (the request stays in flight at the peer).
func (c *Conn) Call(ctx context.Context, method string, params, result any) error {
	c.mu.Lock()
	if c.err != nil {
		err := c.err
		c.mu.Unlock()
		return fmt.Errorf("%s: %w: %w", method, ErrClosed, err)
	}
	c.nextID++
	id := strconv.FormatInt(c.nextID, 10)
	ch := make(chan response, 1)
	c.pending[id] = ch
	c.mu.Unlock()

	p, err := json.Marshal(params)
	if err != nil {
		c.forget(id)
		return fmt.Errorf("%s: encode params: %w", method, err)
	}
	if err := c.write(message{JSONRPC: "2.0", ID: json.RawMessage(id), Method: method, Params: p}); err != nil {
		c.forget(id)
		return fmt.Errorf("%s: %w", method, err)
	}
	select {
	case r := <-ch:
		if r.err != nil {
			return r.err
		}
		if result != nil && len(r.result) > 0 {
			if err := json.Unmarshal(r.result, result); err != nil {
				return fmt.Errorf("%s: decode result: %w", method, err)
			}
		}
		return nil
	case <-ctx.Done():
		c.forget(id)
		return ctx.Err()
	}
}

// Notify sends a notification.
func (c *Conn) Notify(method string, params any) error {
	p, err := json.Marshal(params)
	if err != nil {
		return fmt.Errorf("%s: encode params: %w", method, err)
	}
	return c.write(message{JSONRPC: "2.0", Method: method, Params: p})
}

func (c *Conn) forget(id string) {
	c.mu.Lock()
	delete(c.pending, id)
	c.mu.Unlock()
}

func (c *Conn) write(m message) error {
	b, err := json.Marshal(m)
	if err != nil {
		return err
	}
	b = append(b, '\n')
	c.wmu.Lock()
	defer c.wmu.Unlock()
	_, err = c.w.Write(b)
	return err
}

func (c *Conn) read(r io.Reader) {
	defer c.wg.Done()
	lr := lineReader{r: bufio.NewReaderSize(r, 64<<10), max: c.maxLine}
	var err error
	for {
		var line []byte
		if line, err = lr.next(); err != nil {
			break
		}
		if len(line) == 0 {
			continue
		}
		var m message
		if err := json.Unmarshal(line, &m); err != nil {
			// A harness that prints non-JSON to stdout breaks the protocol;
			// skip the line rather than the session.
			continue
		}
		switch {
		case m.Method != "" && len(m.ID) > 0:
			c.mu.Lock()
			busy := c.inflight >= MaxInflight
			if !busy {
				c.inflight++
			}
			c.mu.Unlock()
			if busy {
				_ = c.write(message{JSONRPC: "2.0", ID: m.ID, Error: &Error{Code: CodeInternal, Message: fmt.Sprintf("more than %d requests in flight; wait for their answers", MaxInflight)}})
				continue
			}
			c.wg.Add(1)
			go c.serve(m)
		case m.Method != "":
			if c.handler != nil {
				_, _ = c.handler.Handle(c.ctx, m.Method, m.Params, true)
			}
		case len(m.ID) > 0:
			c.mu.Lock()
			ch, ok := c.pending[string(m.ID)]
			delete(c.pending, string(m.ID))
			c.mu.Unlock()
			if ok {
				ch <- response{result: m.Result, err: m.Error}
			}
		}
	}
	c.mu.Lock()
	c.err = err
	pending := c.pending
	c.pending = map[string]chan response{}
	c.mu.Unlock()
	// Done first: a caller woken by the failed response can then tell a
	// dead peer from an error the peer sent.
	close(c.done)
	for _, ch := range pending {
		ch <- response{err: &Error{Code: CodeInternal, Message: "connection closed: " + err.Error()}}
	}
}

func (c *Conn) serve(m message) {
	defer c.wg.Done()
	defer func() {
		c.mu.Lock()
		c.inflight--
		c.mu.Unlock()
	}()
	var (
		res any
		err error
	)
	if c.handler == nil {
		err = &Error{Code: CodeMethodNotFound, Message: "method not found: " + m.Method}
	} else {
		res, err = c.handler.Handle(c.ctx, m.Method, m.Params, false)
	}
	out := message{JSONRPC: "2.0", ID: m.ID}
	if err != nil {
		var re *Error
		if !errors.As(err, &re) {
			re = &Error{Code: CodeInternal, Message: err.Error()}
		}
		out.Error = re
	} else {
		b, merr := json.Marshal(res)
		if merr != nil {
			out.Error = &Error{Code: CodeInternal, Message: merr.Error()}
		} else {
			out.Result = b
		}
	}
	_ = c.write(out)
}

// lineReader reads newline-terminated lines of at most max bytes. A line
// longer than its buffer is gathered in memory of its own, dropped with
// the line: one long line does not keep its size for the connection's
// life, as a bufio.Scanner's buffer would.
type lineReader struct {
	r   *bufio.Reader
	max int
}

// next returns the next line without its newline (valid until the next
// call), io.EOF at the end, or ErrLineTooLong once a line passes max.
func (lr *lineReader) next() ([]byte, error) {
	chunk, err := lr.r.ReadSlice('\n')
	if err == nil {
		return lr.check(trimEOL(chunk))
	}
	var long []byte
	for errors.Is(err, bufio.ErrBufferFull) {
		if len(long)+len(chunk) > lr.max+1 { // +1: the newline may follow
			return nil, fmt.Errorf("%w: more than %d bytes", ErrLineTooLong, lr.max)
		}
		long = append(long, chunk...)
		chunk, err = lr.r.ReadSlice('\n')
	}
	long = append(long, chunk...)
	if err != nil && (err != io.EOF || len(long) == 0) {
		return nil, err
	}
	return lr.check(trimEOL(long))
}

func (lr *lineReader) check(line []byte) ([]byte, error) {
	if len(line) > lr.max {
		return nil, fmt.Errorf("%w: more than %d bytes", ErrLineTooLong, lr.max)
	}
	return line, nil
}

func trimEOL(b []byte) []byte {
	b = bytes.TrimSuffix(b, []byte("\n"))
	return bytes.TrimSuffix(b, []byte("\r"))
}
