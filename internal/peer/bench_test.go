package peer

import (
	"io"
	"net/http"
	"net/http/httptest"
	"slices"
	"strings"
	"testing"
	"time"
)

// BenchmarkForwardBodyOnRequest: what waiting for the owner to ask for a
// forwarded body (Expect: 100-continue, the proof that a request on a
// closed kept-alive connection was never read) adds to a forward, against
// the same forward sending the body at once (ExpectContinueTimeout 0),
// the two interleaved. The owner reads the body and answers, as the API's
// handlers do; both keep their connection alive.
func BenchmarkForwardBodyOnRequest(b *testing.B) {
	owner := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		_, _ = io.ReadAll(r.Body)
		_, _ = io.WriteString(w, `{"ok":true}`)
	}))
	defer owner.Close()
	reg := newRegistry(fresh("replica-b", owner.URL))
	asked := New(Config{Self: "replica-a", Token: peerToken, Registry: reg, Heartbeat: time.Hour})
	defer asked.Close()
	atOnce := New(Config{Self: "replica-a", Token: peerToken, Registry: reg, Heartbeat: time.Hour})
	atOnce.rt.ExpectContinueTimeout = 0
	defer atOnce.Close()
	body := `{"harness":"fake","sessionId":"bench","projectId":"p","messages":[{"role":"user","content":"say ok"}]}`
	forward := func(p *Peers) time.Duration {
		start := time.Now()
		w := httptest.NewRecorder()
		if err := p.Forward(w, httptest.NewRequest("POST", "/stream", strings.NewReader(body)), []byte(body), "replica-b"); err != nil || w.Code != 200 {
			b.Fatalf("forward: %v %d", err, w.Code)
		}
		return time.Since(start)
	}
	for range 20 {
		forward(asked)
		forward(atOnce)
	}
	var a, o []time.Duration
	for b.Loop() {
		a = append(a, forward(asked))
		o = append(o, forward(atOnce))
	}
	p := func(ds []time.Duration, q int) float64 {
		slices.Sort(ds)
		return float64(ds[len(ds)*q/100]) / float64(time.Millisecond)
	}
	b.ReportMetric(p(o, 50), "at-once-p50-ms")
	b.ReportMetric(p(a, 50), "asked-p50-ms")
	b.ReportMetric(p(o, 99), "at-once-p99-ms")
	b.ReportMetric(p(a, 99), "asked-p99-ms")
	b.ReportMetric(p(a, 50)-p(o, 50), "added-p50-ms")
}
