package sandboxd

import (
	"bytes"
	"context"
	"encoding/json"
	"net/http"
	"net/http/httptest"
	"strings"
	"sync"
	"testing"
	"testing/synctest"
	"time"

	"github.com/google/go-cmp/cmp"
)

// lockedRecorder is a ResponseWriter that a test may read while the
// handler writes.
type lockedRecorder struct {
	mu     sync.Mutex
	header http.Header
	body   bytes.Buffer
}

func (r *lockedRecorder) Header() http.Header {
	r.mu.Lock()
	defer r.mu.Unlock()
	if r.header == nil {
		r.header = http.Header{}
	}
	return r.header
}
func (r *lockedRecorder) WriteHeader(int) {}
func (r *lockedRecorder) Flush()          {}
func (r *lockedRecorder) Write(p []byte) (int, error) {
	r.mu.Lock()
	defer r.mu.Unlock()
	return r.body.Write(p)
}

func (r *lockedRecorder) events(t *testing.T) []Event {
	r.mu.Lock()
	defer r.mu.Unlock()
	var evs []Event
	for _, line := range strings.Split(strings.TrimSpace(r.body.String()), "\n") {
		if line == "" {
			continue
		}
		var ev Event
		if err := json.Unmarshal([]byte(line), &ev); err != nil {
			t.Fatalf("line %q: %v", line, err)
		}
		evs = append(evs, ev)
	}
	return evs
}

// TestEventsHeartbeat checks that an idle stream carries a heartbeat line
// per interval, so that proxies keep it open, and ends after the exit event.
func TestEventsHeartbeat(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		srv, err := NewServer(Config{Token: "t", Workdir: "/", Heartbeat: 5 * time.Second})
		if err != nil {
			t.Fatal(err)
		}
		e := &entry{id: "x", out: newEventLog(1 << 20), done: make(chan struct{})}
		srv.entries["x"] = e
		req := httptest.NewRequestWithContext(t.Context(), http.MethodGet, "/v1/entries/x/events", nil)
		req.SetPathValue("id", "x")
		w := &lockedRecorder{}
		done := make(chan struct{})
		go func() {
			srv.events(w, req)
			close(done)
		}()

		time.Sleep(12 * time.Second) // two intervals of silence
		synctest.Wait()
		want := []Event{{Heartbeat: true}, {Heartbeat: true}}
		if diff := cmp.Diff(want, w.events(t)); diff != "" {
			t.Fatalf("after 12s of silence (-want +got):\n%s", diff)
		}

		e.out.append(context.Background(), "stdout", []byte("hi"))
		e.out.finish(ExitStatus{Code: 0})
		<-done
		want = append(want, Event{Seq: 1, Stream: "stdout", Data: []byte("hi")}, Event{Seq: 2, Exit: &ExitStatus{}})
		if diff := cmp.Diff(want, w.events(t)); diff != "" {
			t.Errorf("stream (-want +got):\n%s", diff)
		}
	})
}

// TestEventLogBackpressure checks that a full log blocks its producer
// until a reader acknowledges, and drops nothing.
func TestEventLogBackpressure(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		l := newEventLog(4)
		l.append(context.Background(), "stdout", []byte("abcd"))
		appended := make(chan bool)
		go func() { appended <- l.append(context.Background(), "stdout", []byte("ef")) }()
		synctest.Wait()
		select {
		case <-appended:
			t.Fatal("append to a full log did not wait")
		default:
		}
		l.ack(1)
		if !<-appended {
			t.Fatal("append failed after the ack")
		}
		evs, _, _, err := l.read(1)
		if err != nil || len(evs) != 1 || string(evs[0].Data) != "ef" {
			t.Errorf("read after ack = %v, %v", evs, err)
		}
		if _, _, _, err := l.read(0); err != errGone {
			t.Errorf("read before the acknowledged seq = %v, want errGone", err)
		}
	})
}
