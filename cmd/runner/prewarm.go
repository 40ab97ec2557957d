package main

import "github.com/agentrunner/runner/internal/runner"

// prewarmHealth is /health's view of the pre-warmed slots, one entry per
// shape.
func prewarmHealth(stats []runner.PrewarmStats) []map[string]any {
	out := make([]map[string]any, 0, len(stats))
	for _, st := range stats {
		e := map[string]any{
			"harness": st.Harness, "provider": st.Provider, "slots": st.Slots,
			"ready": st.Ready, "claimed": st.Claimed, "refilling": st.Refilling,
			"hits": st.Hits, "misses": st.Misses,
		}
		if st.LastError != "" {
			e["lastError"] = st.LastError
		}
		out = append(out, e)
	}
	return out
}
