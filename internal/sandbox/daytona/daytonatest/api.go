package daytonatest

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"encoding/json"
	"fmt"
	"net/http"
	"net/netip"
	"os"
	"path/filepath"
	"sort"
	"strconv"
	"strings"
	"time"
)

// The sandbox API: lifecycle, state machine, labels, network, previews.

func (s *Server) create(w http.ResponseWriter, r *http.Request) {
	var req struct {
		Snapshot            string            `json:"snapshot"`
		BuildInfo           *json.RawMessage  `json:"buildInfo"`
		Target              string            `json:"target"`
		Labels              map[string]string `json:"labels"`
		Env                 map[string]string `json:"env"`
		NetworkBlockAll     bool              `json:"networkBlockAll"`
		NetworkAllowList    *string           `json:"networkAllowList"`
		DomainAllowList     *string           `json:"domainAllowList"`
		AutoStopInterval    *int              `json:"autoStopInterval"`
		AutoArchiveInterval *int              `json:"autoArchiveInterval"`
		AutoDeleteInterval  *int              `json:"autoDeleteInterval"`
	}
	if err := json.NewDecoder(r.Body).Decode(&req); err != nil {
		apiError(w, r, http.StatusBadRequest, "invalid body: "+err.Error())
		return
	}
	if req.Snapshot != "" && req.BuildInfo != nil {
		apiError(w, r, http.StatusBadRequest, "Cannot specify both snapshot and build info")
		return
	}
	if msg := validateAllowList(req.NetworkAllowList); msg != "" {
		apiError(w, r, http.StatusBadRequest, msg)
		return
	}
	id := newUUID()
	root := filepath.Join(s.root, id)
	if err := os.MkdirAll(filepath.Join(root, "home"), 0o755); err != nil {
		apiError(w, r, http.StatusInternalServerError, err.Error())
		return
	}
	sb := sandboxJSON{
		ID: id, OrganizationID: "org-fake", Name: id, User: "daytona", Env: req.Env, Labels: req.Labels,
		NetworkBlockAll: req.NetworkBlockAll, NetworkAllowList: nonEmpty(req.NetworkAllowList), DomainAllowList: nonEmpty(req.DomainAllowList),
		Target: req.Target, CPU: 1, Memory: 1, Disk: 3, Snapshot: req.Snapshot, State: "creating", DesiredState: "started",
		AutoStopInterval: intOr(req.AutoStopInterval, 15), AutoArchiveInterval: intOr(req.AutoArchiveInterval, 10080),
		AutoDeleteInterval: intOr(req.AutoDeleteInterval, -1), ToolboxProxyURL: s.URL + "/toolbox",
		CreatedAt: time.Now().UTC().Format(time.RFC3339),
	}
	if sb.Env == nil {
		sb.Env = map[string]string{}
	}
	if sb.Labels == nil {
		sb.Labels = map[string]string{}
	}
	if sb.Target == "" {
		sb.Target = "us"
	}
	s.mu.Lock()
	s.sandboxes[id] = &box{sb: sb, next: "started", polls: s.opts.TransitionPolls, root: root,
		sessions: map[string]map[string]*command{}, proxied: map[int]context.CancelFunc{}, freezers: map[int]*freezer{}}
	s.mu.Unlock()
	writeJSON(w, http.StatusOK, sb)
}

func nonEmpty(s *string) *string {
	if s == nil || *s == "" {
		return nil
	}
	return s
}

func intOr(p *int, def int) int {
	if p == nil {
		return def
	}
	return *p
}

// validateAllowList applies Daytona's rule: comma-separated IPv4 CIDRs, at most 10.
func validateAllowList(s *string) string {
	if s == nil || *s == "" {
		return ""
	}
	parts := strings.Split(*s, ",")
	if len(parts) > 10 {
		return "Network allow list cannot contain more than 10 networks"
	}
	for _, p := range parts {
		pfx, err := netip.ParsePrefix(strings.TrimSpace(p))
		if err != nil || !pfx.Addr().Is4() {
			return fmt.Sprintf("Invalid network allow list: %q is not a valid IPv4 CIDR", p)
		}
	}
	return ""
}

func newUUID() string {
	b := make([]byte, 16)
	_, _ = rand.Read(b)
	b[6] = b[6]&0x0f | 0x40
	b[8] = b[8]&0x3f | 0x80
	h := hex.EncodeToString(b)
	return h[:8] + "-" + h[8:12] + "-" + h[12:16] + "-" + h[16:20] + "-" + h[20:]
}

// lookup returns the box of the request's {id}, advancing its transition
// when advance is set (a GET of the sandbox); it answers 404 itself.
// Called with mu held.
func (s *Server) lookup(w http.ResponseWriter, r *http.Request, advance bool) *box {
	b := s.sandboxes[r.PathValue("id")]
	if b == nil {
		apiError(w, r, http.StatusNotFound, fmt.Sprintf("Sandbox with ID or name %s not found", r.PathValue("id")))
		return nil
	}
	if advance && b.next != "" {
		b.polls--
		if b.polls <= 0 {
			b.sb.State, b.next = b.next, ""
			b.sb.DesiredState = ""
			if b.sb.State == "destroyed" {
				delete(s.sandboxes, b.sb.ID)
			}
		}
	}
	return b
}

func (s *Server) list(w http.ResponseWriter, r *http.Request) {
	var want map[string]string
	if l := r.URL.Query().Get("labels"); l != "" {
		if err := json.Unmarshal([]byte(l), &want); err != nil {
			apiError(w, r, http.StatusBadRequest, "labels: "+err.Error())
			return
		}
	}
	states := r.URL.Query()["states"]
	limit := 100
	if l := r.URL.Query().Get("limit"); l != "" {
		n, err := strconv.Atoi(l)
		if err != nil || n < 1 || n > 200 {
			apiError(w, r, http.StatusBadRequest, "limit must be between 1 and 200")
			return
		}
		limit = n
	}
	if s.opts.ListLimit > 0 {
		limit = min(limit, s.opts.ListLimit)
	}
	cursor := r.URL.Query().Get("cursor")
	s.mu.Lock()
	defer s.mu.Unlock()
	// Pages are in id order; the cursor is the last id of the page before.
	ids := make([]string, 0, len(s.sandboxes))
	for id := range s.sandboxes {
		if id > cursor {
			ids = append(ids, id)
		}
	}
	sort.Strings(ids)
	items := []sandboxJSON{}
	var next *string
	for _, id := range ids {
		b := s.sandboxes[id]
		if len(items) == limit {
			last := items[len(items)-1].ID
			next = &last
			break
		}
		ok := true
		for k, v := range want {
			if b.sb.Labels[k] != v {
				ok = false
			}
		}
		if len(states) > 0 && !contains(states, b.sb.State) {
			ok = false
		}
		if ok {
			items = append(items, b.sb)
		}
	}
	writeJSON(w, http.StatusOK, map[string]any{"items": items, "nextCursor": next})
}

func contains(list []string, v string) bool {
	for _, x := range list {
		if x == v {
			return true
		}
	}
	return false
}

func (s *Server) get(w http.ResponseWriter, r *http.Request) {
	s.mu.Lock()
	defer s.mu.Unlock()
	b := s.lookup(w, r, true)
	if b == nil {
		return
	}
	if b.sb.State == "destroyed" {
		apiError(w, r, http.StatusNotFound, fmt.Sprintf("Sandbox with ID or name %s not found", b.sb.ID))
		return
	}
	writeJSON(w, http.StatusOK, b.sb)
}

// transition starts an asynchronous move of b from one of the from states
// through via to to. Called with mu held.
func (s *Server) transition(w http.ResponseWriter, r *http.Request, b *box, from []string, via, to string) bool {
	if b.next != "" || !contains(from, b.sb.State) {
		apiError(w, r, http.StatusBadRequest, fmt.Sprintf("Sandbox is not in a valid state for this action (state %s)", b.sb.State))
		return false
	}
	b.sb.State, b.next, b.polls, b.sb.DesiredState = via, to, s.opts.TransitionPolls, to
	return true
}

func (s *Server) start(w http.ResponseWriter, r *http.Request) {
	s.mu.Lock()
	defer s.mu.Unlock()
	b := s.lookup(w, r, false)
	if b == nil {
		return
	}
	if b.sb.State == "started" {
		writeJSON(w, http.StatusOK, b.sb)
		return
	}
	if s.transition(w, r, b, []string{"stopped", "archived"}, "starting", "started") {
		writeJSON(w, http.StatusOK, b.sb)
	}
}

func (s *Server) stop(w http.ResponseWriter, r *http.Request) {
	s.mu.Lock()
	b := s.lookup(w, r, false)
	if b == nil {
		s.mu.Unlock()
		return
	}
	ok := s.transition(w, r, b, []string{"started"}, "stopping", "stopped")
	sb := b.sb
	s.mu.Unlock()
	if ok {
		// A stopped sandbox runs nothing: its processes end with the stop.
		s.halt(b)
		s.dropAll(sb.ID)
		writeJSON(w, http.StatusOK, sb)
	}
}

func (s *Server) dropAll(id string) { s.DropConnections(id) }

func (s *Server) archive(w http.ResponseWriter, r *http.Request) {
	s.mu.Lock()
	defer s.mu.Unlock()
	b := s.lookup(w, r, false)
	if b == nil {
		return
	}
	if b.sb.State != "stopped" {
		apiError(w, r, http.StatusBadRequest, "Sandbox is not stopped")
		return
	}
	if b.sb.AutoDeleteInterval == 0 {
		apiError(w, r, http.StatusBadRequest, "Ephemeral sandboxes cannot be archived")
		return
	}
	if s.transition(w, r, b, []string{"stopped"}, "archiving", "archived") {
		writeJSON(w, http.StatusOK, b.sb)
	}
}

func (s *Server) remove(w http.ResponseWriter, r *http.Request) {
	s.mu.Lock()
	b := s.lookup(w, r, false)
	if b == nil {
		s.mu.Unlock()
		return
	}
	if b.next != "" {
		// As Daytona: no delete while a transition is under way.
		s.mu.Unlock()
		apiError(w, r, http.StatusConflict, "Sandbox state change in progress")
		return
	}
	b.sb.State, b.next, b.polls, b.sb.DesiredState = "destroying", "destroyed", s.opts.TransitionPolls, "destroyed"
	sb := b.sb
	s.mu.Unlock()
	s.halt(b)
	s.dropAll(sb.ID)
	writeJSON(w, http.StatusOK, sb)
}

func (s *Server) network(w http.ResponseWriter, r *http.Request) {
	var req struct {
		NetworkBlockAll  *bool   `json:"networkBlockAll"`
		NetworkAllowList *string `json:"networkAllowList"`
		DomainAllowList  *string `json:"domainAllowList"`
	}
	if err := json.NewDecoder(r.Body).Decode(&req); err != nil {
		apiError(w, r, http.StatusBadRequest, "invalid body: "+err.Error())
		return
	}
	if msg := validateAllowList(req.NetworkAllowList); msg != "" {
		apiError(w, r, http.StatusBadRequest, msg)
		return
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	b := s.lookup(w, r, false)
	if b == nil {
		return
	}
	if req.NetworkBlockAll != nil {
		b.sb.NetworkBlockAll = *req.NetworkBlockAll
	}
	if req.NetworkAllowList != nil {
		b.sb.NetworkAllowList = nonEmpty(req.NetworkAllowList)
	}
	if req.DomainAllowList != nil {
		b.sb.DomainAllowList = nonEmpty(req.DomainAllowList)
	}
	writeJSON(w, http.StatusOK, b.sb)
}

func (s *Server) labels(w http.ResponseWriter, r *http.Request) {
	var req struct {
		Labels map[string]string `json:"labels"`
	}
	if err := json.NewDecoder(r.Body).Decode(&req); err != nil {
		apiError(w, r, http.StatusBadRequest, "invalid body: "+err.Error())
		return
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	b := s.lookup(w, r, false)
	if b == nil {
		return
	}
	b.sb.Labels = req.Labels
	writeJSON(w, http.StatusOK, map[string]any{"labels": req.Labels})
}

func (s *Server) interval(w http.ResponseWriter, r *http.Request) {
	n, err := strconv.Atoi(r.PathValue("n"))
	if err != nil {
		apiError(w, r, http.StatusBadRequest, "interval must be an integer")
		return
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	b := s.lookup(w, r, false)
	if b == nil {
		return
	}
	if strings.Contains(r.URL.Path, "/autostop/") {
		b.sb.AutoStopInterval = n
	} else {
		b.sb.AutoDeleteInterval = n
	}
	w.WriteHeader(http.StatusOK)
}

func (s *Server) preview(w http.ResponseWriter, r *http.Request) {
	port, err := strconv.Atoi(r.PathValue("port"))
	if err != nil {
		apiError(w, r, http.StatusBadRequest, "port must be an integer")
		return
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	b := s.lookup(w, r, false)
	if b == nil {
		return
	}
	tok := randomHex(8)
	s.tokens[tok] = preview{id: b.sb.ID, port: port}
	writeJSON(w, http.StatusOK, map[string]any{
		"sandboxId": b.sb.ID, "port": port, "token": tok, "url": s.URL + "/preview/" + tok,
	})
}
