package main

import (
	"encoding/json"
	"fmt"
	"net/http"
	"os"
	"sort"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/agentrunner/runner/internal/agent/agenttest"
)

// The load test: loadSessions sessions on one `runner serve`, each with a
// live fake-agent harness, loadRunning of them running a turn at any
// moment and the rest warm in the pool.
const (
	loadSessions = 1000
	loadRunning  = 200
)

// procStats samples the serve process: resident memory and open
// descriptors, keeping the peaks.
type procStats struct {
	pid int

	mu      sync.Mutex
	peakFDs int
}

// rssMB is VmRSS (now) or VmHWM (the peak), in MB.
func (p *procStats) rssMB(b *testing.B, field string) float64 {
	raw, err := os.ReadFile("/proc/" + strconv.Itoa(p.pid) + "/status")
	if err != nil {
		b.Fatal(err)
	}
	for _, line := range strings.Split(string(raw), "\n") {
		if rest, ok := strings.CutPrefix(line, field+":"); ok {
			kb, err := strconv.Atoi(strings.TrimSpace(strings.TrimSuffix(strings.TrimSpace(rest), "kB")))
			if err != nil {
				b.Fatalf("%s: %v", field, err)
			}
			return float64(kb) / 1024
		}
	}
	b.Fatalf("no %s in /proc/%d/status", field, p.pid)
	return 0
}

func (p *procStats) sampleFDs() {
	ents, err := os.ReadDir("/proc/" + strconv.Itoa(p.pid) + "/fd")
	if err != nil {
		return
	}
	p.mu.Lock()
	p.peakFDs = max(p.peakFDs, len(ents))
	p.mu.Unlock()
}

// sampleEvery samples descriptors until stop is called.
func (p *procStats) sampleEvery(d time.Duration) (stop func()) {
	done, finished := make(chan struct{}), make(chan struct{})
	go func() {
		defer close(finished)
		t := time.NewTicker(d)
		defer t.Stop()
		for {
			p.sampleFDs()
			select {
			case <-done:
				return
			case <-t.C:
			}
		}
	}()
	return func() { close(done); <-finished }
}

// BenchmarkLoad1000Sessions drives 1,000 sessions through one runner
// process: after each has had its cold first turn, every iteration is one
// warm turn (full history, its own connection) of the session idle
// longest, with 200 turns in flight at once. It fails on any error and
// checks afterwards that every session is warm, every turn completed and
// the ledger counted them all. Reported: per-turn p50/p99, the serve
// process's idle and peak RSS and its RSS per warm session, and its peak
// open descriptors.
func BenchmarkLoad1000Sessions(b *testing.B) {
	bin, prof := benchBinary(b)
	s := startBenchServe(b, bin, append(prof.env,
		"AGENTA_RUNNER_LOCAL_ISOLATION=none", // 1,000 sandboxes' worth of bwrap is the host's, not the runner's
		"AGENTA_RUNNER_LOG_LEVEL=warn",
		"AGENTA_RUNNER_SESSION_POOL_MAX="+strconv.Itoa(loadSessions),
		"AGENTA_RUNNER_SESSION_TTL_MS=900000",
		"AGENTA_RUNNER_HARNESS_FAKE="+strings.Join(agenttest.Command(), " "))...)
	ps := &procStats{pid: s.cmd.Process.Pid}
	idle := ps.rssMB(b, "VmRSS")
	stopFDs := ps.sampleEvery(100 * time.Millisecond)

	client := &http.Client{Transport: &http.Transport{DisableKeepAlives: true, MaxConnsPerHost: 0}}
	sessions := make([]*platformSession, loadSessions)
	for i := range sessions {
		sessions[i] = &platformSession{base: s.base, harness: "fake", id: "load-" + strconv.Itoa(i), client: client}
	}
	// Cold first turns, loadRunning at a time.
	run := func(n int, turn func(i int) error) error {
		var wg sync.WaitGroup
		var mu sync.Mutex
		var first error
		sem := make(chan struct{}, loadRunning)
		for i := range n {
			sem <- struct{}{}
			wg.Go(func() {
				defer func() { <-sem }()
				if err := turn(i); err != nil {
					mu.Lock()
					if first == nil {
						first = err
					}
					mu.Unlock()
				}
			})
		}
		wg.Wait()
		return first
	}
	if err := run(loadSessions, func(i int) error {
		_, _, err := sessions[i].turn("hello")
		return err
	}); err != nil {
		b.Fatalf("cold turns: %v", err)
	}
	warmRSS := ps.rssMB(b, "VmRSS")

	// Sessions wait in idle, oldest first; a turn takes one and gives it back.
	idleq := make(chan *platformSession, loadSessions)
	for _, ps := range sessions {
		idleq <- ps
	}
	var (
		mu    sync.Mutex
		lat   []time.Duration
		first error
		wg    sync.WaitGroup
	)
	sem := make(chan struct{}, loadRunning)
	n := 0
	for b.Loop() {
		sem <- struct{}{}
		ses := <-idleq
		n++
		text := "turn " + strconv.Itoa(n)
		wg.Go(func() {
			defer func() { <-sem }()
			warm, d, err := ses.turn(text)
			if err == nil && !warm {
				err = fmt.Errorf("session %s ran cold", ses.id)
			}
			mu.Lock()
			lat = append(lat, d)
			if err != nil && first == nil {
				first = fmt.Errorf("session %s: %w", ses.id, err)
			}
			mu.Unlock()
			idleq <- ses
		})
	}
	wg.Wait()
	stopFDs()
	if first != nil {
		b.Fatal(first)
	}
	sort.Slice(lat, func(i, j int) bool { return lat[i] < lat[j] })
	b.ReportMetric(millis(percentile(lat, 50)), "turn-p50-ms")
	b.ReportMetric(millis(percentile(lat, 99)), "turn-p99-ms")
	b.ReportMetric(idle, "idle-rss-MB")
	b.ReportMetric((warmRSS-idle)/loadSessions, "MB/warm-session")
	b.ReportMetric(ps.rssMB(b, "VmHWM"), "peak-rss-MB")
	b.ReportMetric(float64(ps.peakFDs), "peak-fds")
	checkLoadSessions(b, s, sessions)
	b.Logf("%d sessions, %d turns; machine: %s", loadSessions, n, loadAverage())
}

// checkLoadSessions reads the runner's own view back: every session warm
// (the pool kept them all), its ledger holding one completed turn per
// turn sent.
func checkLoadSessions(b *testing.B, s *benchServe, sessions []*platformSession) {
	var h struct {
		Warm     int `json:"warm"`
		InFlight int `json:"inFlight"`
	}
	resp, err := http.Get(s.base + "/health")
	if err != nil {
		b.Fatal(err)
	}
	err = json.NewDecoder(resp.Body).Decode(&h)
	resp.Body.Close()
	if err != nil {
		b.Fatal(err)
	}
	if h.Warm != len(sessions) || h.InFlight != 0 {
		b.Fatalf("health after the load: %d warm (want %d), %d in flight", h.Warm, len(sessions), h.InFlight)
	}
	for _, ses := range sessions {
		req, _ := http.NewRequest("GET", s.base+"/v1/sessions/"+ses.id, nil)
		req.Header.Set("Authorization", "Bearer "+testToken)
		resp, err := http.DefaultClient.Do(req)
		if err != nil {
			b.Fatal(err)
		}
		var got struct {
			Turns []struct {
				Status string `json:"status"`
			} `json:"turns"`
		}
		err = json.NewDecoder(resp.Body).Decode(&got)
		resp.Body.Close()
		if err != nil {
			b.Fatal(err)
		}
		if want := len(ses.messages) / 2; len(got.Turns) != want {
			b.Fatalf("session %s: %d turns in the ledger, sent %d", ses.id, len(got.Turns), want)
		}
		for i, t := range got.Turns {
			if t.Status != "completed" {
				b.Fatalf("session %s turn %d: %s", ses.id, i, t.Status)
			}
		}
	}
}
