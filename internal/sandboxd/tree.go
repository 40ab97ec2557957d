package sandboxd

import (
	"encoding/json"
	"net/http"
	"path/filepath"

	"github.com/agentrunner/runner/internal/errdefs"
	"github.com/agentrunner/runner/internal/workspace/tree"
)

// The bulk file API the durable workspace sync uses, so a sandbox's files
// travel over the runner's own connection and the object store never has
// to be reachable from the sandbox:
//
//	POST /v1/tree/scan     TreeScanRequest → tree.Result (hashes computed here)
//	POST /v1/tree/export   TreeExportRequest → tar stream of those entries
//	PUT  /v1/tree/import?root=P  tar stream → 204 (entries written, deletions applied)

// TreeScanRequest is the body of POST /v1/tree/scan.
type TreeScanRequest struct {
	Root    string           `json:"root"`
	Options tree.ScanOptions `json:"options"`
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
	if err := absRoot(req.Root); err != nil {
		writeError(w, err)
		return
	}
	res, err := tree.Scan(req.Root, req.Options)
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
		if _, err := tree.Clean(p); err != nil {
			writeError(w, errdefs.With(errdefs.ErrInvalid, err))
			return
		}
	}
	w.Header().Set("Content-Type", "application/x-tar")
	w.WriteHeader(http.StatusOK)
	// A failure after the header can only cut the stream short, which the
	// reader sees as a truncated tar.
	if err := tree.Export(req.Root, req.Paths, w); err != nil {
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
	if err := tree.Import(root, r.Body, nil); err != nil {
		writeError(w, err)
		return
	}
	w.WriteHeader(http.StatusNoContent)
}
