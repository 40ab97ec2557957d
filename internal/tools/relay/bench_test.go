package relay_test

import (
	"bytes"
	"io"
	"net/http"
	"slices"
	"testing"
	"time"

	"github.com/modelcontextprotocol/go-sdk/mcp"

	"github.com/agentrunner/runner/internal/tools"
)

// BenchmarkToolCallRoundTrip measures a tool call from a harness's MCP
// client through mcp-stdio (a subprocess), the unix socket, the relay
// and the Set to the callback, against a direct HTTP POST of the same
// body to the same callback. Each iteration does one of each, so both
// see the same machine state. The runner's cost is added-p50-ms; the
// target is under 2 ms.
func BenchmarkToolCallRoundTrip(b *testing.B) {
	e := startRelay(b)
	cb := newCallback(b)
	set := newSet(b, cb, "Bearer bench", tools.Config{})
	bind := e.relay.Bind(set, nil)
	b.Cleanup(bind.Close)
	cs := clientFor(b, e, bind)
	params := &mcp.CallToolParams{Name: "lookup", Arguments: map[string]any{"q": "x"}}
	if _, err := cs.CallTool(b.Context(), params); err != nil { // warm the connections
		b.Fatal(err)
	}
	body := []byte(`{"data":{"id":"call_1","type":"function","function":{"name":"tools.test.lookup","arguments":{"q":"x"}}}}`)
	client := &http.Client{Transport: &http.Transport{}}
	defer client.CloseIdleConnections()
	direct := func() {
		req, _ := http.NewRequestWithContext(b.Context(), http.MethodPost, cb.URL+"/tools/call", bytes.NewReader(body))
		req.Header.Set("Authorization", "Bearer bench")
		req.Header.Set("Content-Type", "application/json")
		resp, err := client.Do(req)
		if err != nil {
			b.Fatal(err)
		}
		io.Copy(io.Discard, resp.Body)
		resp.Body.Close()
	}
	direct()

	var dDirect, dRelay []time.Duration
	for b.Loop() {
		start := time.Now()
		direct()
		mid := time.Now()
		res, err := cs.CallTool(b.Context(), params)
		end := time.Now()
		if err != nil || res.IsError {
			b.Fatalf("CallTool: %v %+v", err, res)
		}
		dDirect = append(dDirect, mid.Sub(start))
		dRelay = append(dRelay, end.Sub(mid))
	}
	dp50, dp99 := percentiles(dDirect)
	rp50, rp99 := percentiles(dRelay)
	b.ReportMetric(ms(dp50), "direct-p50-ms")
	b.ReportMetric(ms(dp99), "direct-p99-ms")
	b.ReportMetric(ms(rp50), "relay-p50-ms")
	b.ReportMetric(ms(rp99), "relay-p99-ms")
	b.ReportMetric(ms(rp50-dp50), "added-p50-ms")
}

func percentiles(ds []time.Duration) (p50, p99 time.Duration) {
	if len(ds) == 0 {
		return 0, 0
	}
	slices.Sort(ds)
	return ds[len(ds)/2], ds[min(len(ds)-1, len(ds)*99/100)]
}

func ms(d time.Duration) float64 { return float64(d) / float64(time.Millisecond) }
