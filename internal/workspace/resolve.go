package workspace

import (
	"context"
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"net/url"
	"strings"

	"github.com/agentrunner/runner/internal/wire"
)

// Target is whose durable files a turn needs.
type Target struct {
	ProjectID string
	SessionID string
	AgentID   string // runContext.workflow.artifact.id; empty: no agent folder
	// Request is the turn's request, for a resolver that signs with the
	// caller's own credential (the platform's mount sign endpoints).
	Request *wire.Request
}

// Stores are a turn's durable stores.
type Stores struct {
	Session Store // the working directory and the harness's transcript
	Agent   Store // the agent's shared folder; nil without one
	// Keepers are the leases the stores sign with, so the turn can tell
	// them its deadline; empty for stores without leases.
	Keepers []*Keeper
}

// Resolver finds a turn's stores. ok false means the turn has no durable
// workspace (no store configured for it); an error means one is required
// and cannot be had, and fails the turn.
type Resolver interface {
	Resolve(ctx context.Context, t Target) (s Stores, ok bool, err error)
}

// Configured is the Resolver of a store the runner is configured with
// (AGENTA_RUNNER_STORE_URL, or the data dir by default): sessions under
// sessions/<project>/<session>/, agents under agents/<project>/<agent>/.
type Configured struct {
	Base    Store
	Keepers []*Keeper // the base store's, if it signs leases
}

// Resolve implements Resolver.
func (c Configured) Resolve(ctx context.Context, t Target) (Stores, bool, error) {
	if t.SessionID == "" {
		return Stores{}, false, nil
	}
	project := ProjectSegment(t.ProjectID)
	s := Stores{Session: Prefixed(c.Base, "sessions/"+project+"/"+Segment(t.SessionID)), Keepers: c.Keepers}
	if t.AgentID != "" {
		s.Agent = Prefixed(c.Base, "agents/"+project+"/"+Segment(t.AgentID))
	}
	return s, true, nil
}

// ProjectSegment is the key segment of a project, one per project: the
// empty project (requests naming none) is "default", where it always
// was; a named project's Segment is given a leading '_' when it would
// meet that or a hashed Segment ("_" and hex), so that the project
// literally named "default", or one named like a hash, is another.
func ProjectSegment(project string) string {
	if project == "" {
		return "default"
	}
	s := Segment(project)
	if s == "default" || strings.HasPrefix(s, "_") && url.PathEscape(project) == s {
		s = "_" + s
	}
	return s
}

// Segment makes an id (from a caller) one safe key segment: escaped, and
// hashed when escaping cannot make it safe.
func Segment(id string) string {
	s := url.PathEscape(id)
	if s == "" || s == "." || s == ".." || len(s) > 200 {
		sum := sha256.Sum256([]byte(id))
		return "_" + hex.EncodeToString(sum[:16])
	}
	return s
}

// AgentID is runContext.workflow.artifact.id of r, or "".
func AgentID(r *wire.Request) string {
	if r == nil || r.RunContext == nil || len(r.RunContext.Workflow) == 0 {
		return ""
	}
	var w struct {
		Artifact *struct {
			ID string `json:"id"`
		} `json:"artifact"`
	}
	if json.Unmarshal(r.RunContext.Workflow, &w) != nil || w.Artifact == nil {
		return ""
	}
	return strings.TrimSpace(w.Artifact.ID)
}
