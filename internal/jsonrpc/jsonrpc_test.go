package jsonrpc_test

import (
	"context"
	"encoding/json"
	"errors"
	"io"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/agentrunner/runner/internal/jsonrpc"
	"github.com/google/go-cmp/cmp"
)

// pair connects two Conns through pipes.
func pair(t *testing.T, a, b jsonrpc.Handler) (*jsonrpc.Conn, *jsonrpc.Conn, func()) {
	ar, bw := io.Pipe()
	br, aw := io.Pipe()
	ca := jsonrpc.New(ar, aw, a)
	cb := jsonrpc.New(br, bw, b)
	return ca, cb, func() {
		aw.Close()
		bw.Close()
		ca.Close()
		cb.Close()
	}
}

func TestNotificationsArriveBeforeTheResponse(t *testing.T) {
	var mu sync.Mutex
	var got []string
	client := jsonrpc.HandlerFunc(func(ctx context.Context, method string, params json.RawMessage, notify bool) (any, error) {
		mu.Lock()
		got = append(got, method)
		mu.Unlock()
		return nil, nil
	})
	var server *jsonrpc.Conn
	serverH := jsonrpc.HandlerFunc(func(ctx context.Context, method string, params json.RawMessage, notify bool) (any, error) {
		for i := 0; i < 50; i++ {
			_ = server.Notify("update", map[string]int{"i": i})
		}
		return map[string]string{"stopReason": "end_turn"}, nil
	})
	c, s, done := pair(t, client, serverH)
	server = s
	defer done()
	var res struct {
		StopReason string `json:"stopReason"`
	}
	if err := c.Call(t.Context(), "prompt", nil, &res); err != nil {
		t.Fatal(err)
	}
	mu.Lock()
	defer mu.Unlock()
	if res.StopReason != "end_turn" || len(got) != 50 {
		t.Fatalf("result %+v after %d notifications", res, len(got))
	}
}

func TestErrorsAndClosedPeer(t *testing.T) {
	server := jsonrpc.HandlerFunc(func(ctx context.Context, method string, params json.RawMessage, notify bool) (any, error) {
		if method == "boom" {
			return nil, &jsonrpc.Error{Code: -32002, Message: "resource not found"}
		}
		return nil, errors.New("plain failure")
	})
	c, _, done := pair(t, nil, server)
	var rerr *jsonrpc.Error
	if err := c.Call(t.Context(), "boom", nil, nil); !errors.As(err, &rerr) || rerr.Code != -32002 {
		t.Fatalf("boom: %v", err)
	}
	if err := c.Call(t.Context(), "other", nil, nil); !errors.As(err, &rerr) || rerr.Code != jsonrpc.CodeInternal || rerr.Message != "plain failure" {
		t.Fatalf("other: %v", err)
	}
	done()
	<-c.Done()
	if err := c.Call(context.Background(), "late", nil, nil); !errors.Is(err, jsonrpc.ErrClosed) {
		t.Fatalf("call after close: %v", err)
	}
}

func TestUnknownMethodAndBadLines(t *testing.T) {
	r, w := io.Pipe()
	out, outW := io.Pipe()
	c := jsonrpc.New(r, outW, nil)
	defer func() { w.Close(); c.Close() }()
	go func() {
		_, _ = io.WriteString(w, "not json\n")
		_, _ = io.WriteString(w, `{"jsonrpc":"2.0","id":7,"method":"nope"}`+"\n")
	}()
	var resp struct {
		ID    int           `json:"id"`
		Error jsonrpc.Error `json:"error"`
	}
	if err := json.NewDecoder(out).Decode(&resp); err != nil {
		t.Fatal(err)
	}
	if diff := cmp.Diff(7, resp.ID); diff != "" || resp.Error.Code != jsonrpc.CodeMethodNotFound {
		t.Fatalf("%+v", resp)
	}
}

// TestLineCap: a line up to the cap is delivered whole, however much
// longer than the reader's buffer; the first line over it ends the
// connection with ErrLineTooLong, and a call waiting for a response
// learns it, instead of the reader buffering whatever the peer sends.
func TestLineCap(t *testing.T) {
	const max = 200 << 10 // over the reader's 64 KiB buffer
	var got []int
	h := jsonrpc.HandlerFunc(func(ctx context.Context, method string, params json.RawMessage, notify bool) (any, error) {
		var p struct {
			S string `json:"s"`
		}
		_ = json.Unmarshal(params, &p)
		got = append(got, len(p.S))
		return nil, nil
	})
	r, w := io.Pipe()
	c := jsonrpc.New(r, io.Discard, h, jsonrpc.WithMaxLine(max))
	defer func() { w.Close(); c.Close() }()
	note := func(n int) string {
		return `{"jsonrpc":"2.0","method":"u","params":{"s":"` + strings.Repeat("x", n) + `"}}` + "\n"
	}
	fits := max - len(note(0)) + 1 // the newline is not counted
	go func() {
		_, _ = io.WriteString(w, note(fits))
		_, _ = io.WriteString(w, note(fits+1))
		_, _ = io.WriteString(w, note(1)) // never read
	}()
	err := c.Call(t.Context(), "prompt", nil, nil)
	<-c.Done()
	if !errors.Is(c.Err(), jsonrpc.ErrLineTooLong) || err == nil || !strings.Contains(err.Error(), "line too long") {
		t.Fatalf("conn err %v, call err %v", c.Err(), err)
	}
	if diff := cmp.Diff([]int{fits}, got); diff != "" {
		t.Fatalf("delivered (-want +got):\n%s", diff)
	}
}

// TestInflightCap: a peer that sends requests without waiting for their
// answers gets at most MaxInflight served at once (each holds a
// goroutine while, say, a permission waits for a person); the rest are
// answered at once with an error, and the served ones still answer.
func TestInflightCap(t *testing.T) {
	const sent = jsonrpc.MaxInflight + 44
	release := make(chan struct{})
	var mu sync.Mutex
	running, refused, answered := 0, 0, 0
	h := jsonrpc.HandlerFunc(func(ctx context.Context, method string, params json.RawMessage, notify bool) (any, error) {
		mu.Lock()
		running++
		mu.Unlock()
		<-release
		return "ok", nil
	})
	r, w := io.Pipe()
	out, outW := io.Pipe()
	c := jsonrpc.New(r, outW, h)
	defer func() { w.Close(); c.Close() }()
	go func() {
		for i := range sent {
			_, _ = io.WriteString(w, `{"jsonrpc":"2.0","id":`+strconv.Itoa(i)+`,"method":"session/request_permission"}`+"\n")
		}
	}()
	decoded := make(chan struct{})
	go func() {
		defer close(decoded)
		dec := json.NewDecoder(out)
		for range sent {
			var resp struct {
				Error *jsonrpc.Error `json:"error"`
			}
			if err := dec.Decode(&resp); err != nil {
				return
			}
			mu.Lock()
			if resp.Error != nil && strings.Contains(resp.Error.Message, "in flight") {
				refused++
			} else if resp.Error == nil {
				answered++
			}
			mu.Unlock()
		}
	}()
	// Every request is either being served or refused, soon.
	for deadline := time.Now().Add(time.Minute); ; time.Sleep(time.Millisecond) {
		mu.Lock()
		n := running + refused
		mu.Unlock()
		if n == sent || time.Now().After(deadline) {
			break
		}
	}
	mu.Lock()
	served, refusedNow := running, refused
	mu.Unlock()
	close(release)
	if served != jsonrpc.MaxInflight || refusedNow != sent-jsonrpc.MaxInflight {
		t.Fatalf("%d served at once, %d refused, of %d", served, refusedNow, sent)
	}
	<-decoded
	if answered != jsonrpc.MaxInflight {
		t.Fatalf("%d of the served requests answered", answered)
	}
}
