package sandboxd

import (
	"encoding/json"
	"errors"
	"fmt"
	"net/http"
	"sync"

	"github.com/agentrunner/runner/internal/errdefs"
	"github.com/agentrunner/runner/internal/filetree"
)

// TreeWatchRequest is the body of POST /v1/tree/watch: the root to follow
// and the options of its scans (Exclude is kept; Include is refused).
type TreeWatchRequest struct {
	Root    string               `json:"root"`
	Options filetree.ScanOptions `json:"options"`
}

// TreeWatchResponse is the answer to POST /v1/tree/watch.
type TreeWatchResponse struct {
	ID string `json:"id"`
}

// MaxTreeWatches bounds the watches one daemon keeps (past it a watch is
// refused with 409): a runner watches a few roots per sandbox and closes
// them, so more means watches leaked.
const MaxTreeWatches = 64

// treeWatches are the daemon's watches, on one inotify instance. They
// live in the daemon's memory only: a daemon that replaced another knows
// none of its watches, and says so (404) rather than answer for one.
type treeWatches struct {
	n      filetree.Notifier
	mu     sync.Mutex
	m      map[string]*treeWatch
	closed bool
}

// treeWatch is one watch and the last answer of its scans: the base of
// the next delta.
type treeWatch struct {
	root string
	w    *filetree.Watch

	mu   sync.Mutex // one scan at a time: a generation and its entries go together
	gen  int64
	last filetree.Result // what generation gen answered
}

func (t *treeWatches) add(root string, opt filetree.ScanOptions) (string, error) {
	t.mu.Lock()
	defer t.mu.Unlock()
	if t.closed {
		return "", errGone
	}
	if len(t.m) >= MaxTreeWatches {
		return "", errdefs.With(errdefs.ErrConflict, fmt.Errorf("the daemon already follows %d trees: close one (DELETE /v1/tree/watch/{id})", MaxTreeWatches))
	}
	w, err := t.n.Watch(root, opt)
	if err != nil {
		if errors.Is(err, filetree.ErrUnwatchable) {
			return "", errdefs.With(errdefs.ErrInvalid, err)
		}
		return "", err
	}
	if t.m == nil {
		t.m = map[string]*treeWatch{}
	}
	id := NewID()
	t.m[id] = &treeWatch{root: root, w: w}
	return id, nil
}

func (t *treeWatches) get(id string) (*treeWatch, error) {
	t.mu.Lock()
	defer t.mu.Unlock()
	if tw := t.m[id]; tw != nil {
		return tw, nil
	}
	return nil, errdefs.With(errdefs.ErrNotFound, fmt.Errorf("tree watch %q is unknown to this daemon (it restarted, or the watch was closed): watch again", id))
}

func (t *treeWatches) remove(id string) {
	t.mu.Lock()
	tw := t.m[id]
	delete(t.m, id)
	t.mu.Unlock()
	if tw != nil {
		_ = tw.w.Close()
	}
}

// close ends every watch: the daemon exits.
func (t *treeWatches) close() {
	t.mu.Lock()
	ws := t.m
	t.m, t.closed = nil, true
	t.mu.Unlock()
	for _, tw := range ws {
		_ = tw.w.Close()
	}
}

func (s *Server) treeWatch(w http.ResponseWriter, r *http.Request) {
	var req TreeWatchRequest
	if err := json.NewDecoder(r.Body).Decode(&req); err != nil {
		writeError(w, errdefs.Invalidf("watch request: %v", err))
		return
	}
	if err := absRoot(req.Root); err != nil {
		writeError(w, err)
		return
	}
	id, err := s.trees.add(req.Root, filetree.ScanOptions{Exclude: req.Options.Exclude, Include: req.Options.Include})
	if err != nil {
		writeError(w, err)
		return
	}
	writeJSON(w, http.StatusOK, TreeWatchResponse{ID: id})
}

func (s *Server) treeUnwatch(w http.ResponseWriter, r *http.Request) {
	s.trees.remove(r.PathValue("id")) // idempotent: a retried close finds nothing
	w.WriteHeader(http.StatusNoContent)
}

// treeScanWatched scans through a watch. The hashes a reread directory's
// files keep come from the watch's own previous answer (which the runner
// holds as generation gen) once there is one, so a delta request carries
// no Known list; the first scan uses the runner's.
func (s *Server) treeScanWatched(w http.ResponseWriter, r *http.Request, req TreeScanRequest) {
	tw, err := s.trees.get(req.Watch)
	if err != nil {
		writeError(w, err)
		return
	}
	if req.Root != "" && req.Root != tw.root {
		writeError(w, errdefs.Invalidf("watch %s follows %s, not %s", req.Watch, tw.root, req.Root))
		return
	}
	tw.mu.Lock()
	defer tw.mu.Unlock()
	opt := req.Options
	if tw.gen > 0 {
		opt.Known, opt.TrustBefore = tw.last.Entries, tw.last.Time
	}
	res, err := tw.w.Scan(r.Context(), opt)
	if err != nil {
		writeError(w, err)
		return
	}
	resp := TreeScanResponse{Result: res, Generation: tw.gen + 1}
	if req.Generation > 0 && req.Generation == tw.gen {
		resp.Base = tw.gen
		resp.Entries, resp.Removed = filetree.Diff(tw.last.Entries, res.Entries)
	}
	tw.gen, tw.last = resp.Generation, res
	writeJSON(w, http.StatusOK, resp)
}
