package console

import (
	"encoding/json"
	"fmt"
	"io"
	"maps"
	"slices"
	"strings"
	"text/tabwriter"
	"time"

	"github.com/agentrunner/runner/internal/render"
	"github.com/agentrunner/runner/internal/wire"
)

// What the CLI shows of a running service: its sessions and its health.

// SessionView is the part of GET /v1/sessions[/ID] shown on a terminal.
type SessionView struct {
	ID            string    `json:"id"`
	ProjectID     string    `json:"projectId"`
	Harness       string    `json:"harness"`
	Status        string    `json:"status"`
	Running       bool      `json:"running"`
	Warm          bool      `json:"warm"`
	Paused        bool      `json:"paused"`
	LastTurnIndex int       `json:"lastTurnIndex"`
	LastSeq       int64     `json:"lastSeq"`
	UpdatedAt     time.Time `json:"updatedAt"`
	Turns         []struct {
		Index      int        `json:"index"`
		Status     string     `json:"status"`
		StopReason string     `json:"stopReason"`
		Error      string     `json:"error"`
		Usage      wire.Usage `json:"usage"`
	} `json:"turns"`
	Pending []struct {
		InteractionID string          `json:"interactionId"`
		ToolName      string          `json:"toolName"`
		Input         json.RawMessage `json:"input"`
	} `json:"pendingInteractions"`
}

func (v SessionView) state() string {
	switch {
	case v.Running:
		return "running"
	case v.Paused || len(v.Pending) > 0:
		return "paused"
	case v.Warm:
		return "warm"
	}
	return "idle"
}

// ListSessions writes a list of sessions as a table, most recent first as
// the service sent them.
func ListSessions(w io.Writer, list []SessionView, now time.Time) {
	if len(list) == 0 {
		fmt.Fprintln(w, "no sessions")
		return
	}
	tw := tabwriter.NewWriter(w, 2, 4, 2, ' ', 0)
	fmt.Fprintln(tw, "SESSION\tPROJECT\tHARNESS\tSTATE\tTURNS\tUPDATED")
	for _, s := range list {
		fmt.Fprintf(tw, "%s\t%s\t%s\t%s\t%d\t%s ago\n", render.Clean(s.ID), render.Clean(s.ProjectID), render.Clean(s.Harness),
			s.state(), s.LastTurnIndex+1, now.Sub(s.UpdatedAt).Round(time.Second))
	}
	_ = tw.Flush()
}

// ShowSession writes one session: its turns and pending approvals.
func ShowSession(w io.Writer, v SessionView) {
	fmt.Fprintf(w, "session %s  project %s  harness %s  %s\n", render.Clean(v.ID), render.Clean(v.ProjectID), render.Clean(v.Harness), v.state())
	for _, t := range v.Turns {
		line := fmt.Sprintf("  turn %d  %s", t.Index, render.Clean(t.Status))
		if t.StopReason != "" {
			line += "  " + render.Clean(t.StopReason)
		}
		if t.Usage.Input > 0 || t.Usage.Output > 0 {
			line += fmt.Sprintf("  %d in · %d out tokens", t.Usage.Input, t.Usage.Output)
		}
		if t.Error != "" {
			line += "  " + render.Clean(t.Error)
		}
		fmt.Fprintln(w, line)
	}
	for _, p := range v.Pending {
		fmt.Fprintf(w, "  waiting: %s %s  %s\n", render.Clean(p.InteractionID), render.Clean(p.ToolName), render.Clean(string(p.Input)))
	}
	fmt.Fprintf(w, "follow it: runner sessions tail %s\n", render.Clean(v.ID))
}

// SummarizeHealth writes a /health body as a few lines for a person; false
// when the body is not one (it is then shown as it came).
func SummarizeHealth(w io.Writer, url string, body []byte) bool {
	var h struct {
		Status    string                    `json:"status"`
		Runner    string                    `json:"runner"`
		Harnesses []string                  `json:"harnesses"`
		Installed map[string]map[string]any `json:"harnessesInstalled"`
		Providers map[string]map[string]any `json:"providers"`
		InFlight  int                       `json:"inFlight"`
		Warm      int                       `json:"warm"`
	}
	if json.Unmarshal(body, &h) != nil || h.Status == "" {
		return false
	}
	fmt.Fprintf(w, "runner %s at %s: %s\n", render.Clean(h.Runner), url, render.Clean(h.Status))
	var hs []string
	for _, name := range h.Harnesses {
		in, ok := h.Installed[name]
		switch {
		case !ok:
			hs = append(hs, render.Clean(name))
		case in["installed"] == true:
			hs = append(hs, render.Clean(name))
		default:
			hs = append(hs, render.Clean(name)+" (not installed: runner harness install "+render.Clean(name)+")")
		}
	}
	fmt.Fprintf(w, "  harnesses  %s\n", strings.Join(hs, ", "))
	names := slices.Sorted(maps.Keys(h.Providers))
	for _, name := range names {
		d := h.Providers[name]
		line := render.Clean(name)
		if iso, ok := d["isolation"].(string); ok {
			line += "  isolation " + render.Clean(iso)
		}
		if on, ok := d["network_on"].(string); ok {
			line += "  network on: " + render.Clean(on)
		}
		fmt.Fprintf(w, "  provider   %s\n", line)
	}
	fmt.Fprintf(w, "  turns      %d running, %d warm\n", h.InFlight, h.Warm)
	return true
}
