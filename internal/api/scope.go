package api

import (
	"context"
	"fmt"
	"net/http"

	"github.com/agentrunner/runner/internal/errdefs"
	"github.com/agentrunner/runner/internal/store"
	"github.com/agentrunner/runner/internal/wire"
)

// caller is who a request authenticated as: the operator (the runner
// token: every project) or one project (scoped, by its token).
type caller struct {
	project string
	scoped  bool
}

type callerKey struct{}

func withCaller(r *http.Request, c caller) *http.Request {
	if !c.scoped {
		return r // the operator: nothing to carry
	}
	return r.WithContext(context.WithValue(r.Context(), callerKey{}, c))
}

func callerOf(r *http.Request) caller {
	c, _ := r.Context().Value(callerKey{}).(caller)
	return c
}

// allow refuses a project other than a project token's own.
func (c caller) allow(project string) error {
	if c.scoped && project != c.project {
		return errdefs.With(errdefs.ErrForbidden, fmt.Errorf("projectId %q: this token is project %q's and reaches only its sessions; name that project, or send the runner token (AGENTA_RUNNER_TOKEN) or %q's token", project, c.project, project))
	}
	return nil
}

// scopeRequest confines a turn to a project token's project: every
// project the request names (projectId, runContext.project.id) must be
// it, and a request naming none is given it.
func (c caller) scopeRequest(req *wire.Request) error {
	if !c.scoped {
		return nil
	}
	named := false
	if rc := req.RunContext; rc != nil && rc.Project != nil && rc.Project.ID != "" {
		if err := c.allow(rc.Project.ID); err != nil {
			return fmt.Errorf("runContext.project.id: %w", err)
		}
		named = true
	}
	if req.ProjectID != "" {
		if err := c.allow(req.ProjectID); err != nil {
			return err
		}
		named = true
	}
	if !named {
		req.ProjectID = c.project
	}
	return nil
}

// projectHeader names the project of a /v1 request, as the projectId
// query parameter does.
const projectHeader = "X-Agenta-Project-Id"

// projectScope is the project a /v1 request names (?projectId= or the
// X-Agenta-Project-Id header) and whether it names one; a project token
// names its own when the request names none, and no other.
func projectScope(r *http.Request) (string, bool, error) {
	q, hasQ := r.URL.Query()["projectId"]
	hv, hasH := r.Header[http.CanonicalHeaderKey(projectHeader)]
	var project string
	named := true
	switch {
	case hasQ && hasH && (len(q) != 1 || len(hv) != 1 || q[0] != hv[0]):
		return "", false, errdefs.Invalidf("projectId: the query parameter and the %s header name different projects; send one", projectHeader)
	case hasQ && len(q) != 1, hasH && len(hv) != 1:
		return "", false, errdefs.Invalidf("projectId: named more than once; name one project")
	case hasQ:
		project = q[0]
	case hasH:
		project = hv[0]
	default:
		named = false
	}
	c := callerOf(r)
	if !c.scoped {
		return project, named, nil
	}
	if named {
		if err := c.allow(project); err != nil {
			return "", false, err
		}
	}
	return c.project, true, nil
}

// listScope is the project whose sessions a list shows: "" (every
// project) for the operator naming none.
func listScope(r *http.Request) (string, error) {
	project, _, err := projectScope(r)
	return project, err
}

// sessionKey is the session a /v1 path names, in the request's project.
// The operator naming no project reaches the one project holding the id
// (none is 404, several 409: name one); a session id alone never reaches
// another project's session once a project is named.
func (h *Handler) sessionKey(r *http.Request) (store.SessionKey, error) {
	project, named, err := projectScope(r)
	if err != nil {
		return store.SessionKey{}, err
	}
	id := r.PathValue("id")
	if !named {
		return h.runner.LocateSession(r.Context(), id)
	}
	return store.SessionKey{ProjectID: project, SessionID: id}, nil
}
