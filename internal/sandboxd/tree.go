package sandboxd

import (
	"encoding/json"
	"net/http"
	"path/filepath"

	"github.com/agentrunner/runner/internal/errdefs"
	"github.com/agentrunner/runner/internal/filetree"
)

// The bulk file API the durable workspace sync uses, so a sandbox's files
// travel over the runner's own connection and the object store never has
// to be reachable from the sandbox:
//
//	POST   /v1/tree/scan     TreeScanRequest → TreeScanResponse (hashes computed here)
//	POST   /v1/tree/export   TreeExportRequest → tar stream of those entries
//	PUT    /v1/tree/import?root=P  tar stream → 204 (entries written, deletions applied)
//	POST   /v1/tree/watch    TreeWatchRequest → TreeWatchResponse (tree_watch.go)
//	DELETE /v1/tree/watch/{id}  → 204
//
// A scan naming a watch reads only the directories changed since the
// watch's previous scan (inotify, as tree.Watch does on the runner's own
// disk) and answers with what changed since the generation the runner
// holds: a few hundred bytes for an unchanged tree, not the whole list.

// TreeScanRequest is the body of POST /v1/tree/scan.
type TreeScanRequest struct {
	Root    string               `json:"root"`
	Options filetree.ScanOptions `json:"options"`
	// Watch, when set, scans through that watch (Root is then its root);
	// Generation is that of the last answer the runner applied, 0 for
	// none. A daemon older than watches ignores both and answers in full.
	Watch      string `json:"watch,omitempty"`
	Generation int64  `json:"generation,omitempty"`
}

// TreeScanResponse is the answer to POST /v1/tree/scan: a tree.Result,
// whole unless Base is set. With Base, Entries are those new or changed
// since the scan of generation Base and Removed the paths gone since
// (tree.Diff). A plain scan, and a daemon older than watches, answer
// with Generation 0.
type TreeScanResponse struct {
	filetree.Result
	Generation int64    `json:"generation,omitempty"`
	Base       int64    `json:"base,omitempty"`
	Removed    []string `json:"removed,omitempty"`
}

// TreeExportRequest is the body of POST /v1/tree/export.
type TreeExportRequest struct {
	Root  string   `json:"root"`
	Paths []string `json:"paths"`
}

func (s *Server) treeRoutes(mux *http.ServeMux) {
	mux.HandleFunc("POST /v1/tree/scan", s.treeScan)
	mux.HandleFunc("POST /v1/tree/export", s.treeExport)
	mux.HandleFunc("PUT /v1/tree/import", s.treeImport)
	mux.HandleFunc("POST /v1/tree/watch", s.treeWatch)
	mux.HandleFunc("DELETE /v1/tree/watch/{id}", s.treeUnwatch)
}

func absRoot(root string) error {
	if !filepath.IsAbs(root) {
		return errdefs.Invalidf("root %q is not absolute", root)
	}
	return nil
}

func (s *Server) treeScan(w http.ResponseWriter, r *http.Request) {
	var req TreeScanRequest
	if err := json.NewDecoder(r.Body).Decode(&req); err != nil {
		writeError(w, errdefs.Invalidf("scan request: %v", err))
		return
	}
	if req.Watch != "" {
		s.treeScanWatched(w, r, req)
		return
	}
	if err := absRoot(req.Root); err != nil {
		writeError(w, err)
		return
	}
	res, err := filetree.Scan(req.Root, req.Options)
	if err != nil {
		writeError(w, err)
		return
	}
	writeJSON(w, http.StatusOK, res)
}

func (s *Server) treeExport(w http.ResponseWriter, r *http.Request) {
	var req TreeExportRequest
	if err := json.NewDecoder(r.Body).Decode(&req); err != nil {
		writeError(w, errdefs.Invalidf("export request: %v", err))
		return
	}
	if err := absRoot(req.Root); err != nil {
		writeError(w, err)
		return
	}
	for _, p := range req.Paths {
		if _, err := filetree.Clean(p); err != nil {
			writeError(w, errdefs.With(errdefs.ErrInvalid, err))
			return
		}
	}
	w.Header().Set("Content-Type", "application/x-tar")
	w.WriteHeader(http.StatusOK)
	// A failure after the header can only cut the stream short, which the
	// reader sees as a truncated tar.
	if err := filetree.Export(req.Root, req.Paths, w); err != nil {
		s.log.Warn("tree export cut short", "root", req.Root, "error", err)
		panic(http.ErrAbortHandler)
	}
}

func (s *Server) treeImport(w http.ResponseWriter, r *http.Request) {
	root := r.URL.Query().Get("root")
	if err := absRoot(root); err != nil {
		writeError(w, err)
		return
	}
	if err := filetree.Import(root, r.Body, nil); err != nil {
		writeError(w, err)
		return
	}
	w.WriteHeader(http.StatusNoContent)
}
