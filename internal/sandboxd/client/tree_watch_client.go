package client

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"net/http"
	"net/url"
	"slices"
	"sync"
	"time"

	"github.com/agentrunner/runner/internal/errdefs"
	"github.com/agentrunner/runner/internal/filetree"
	"github.com/agentrunner/runner/internal/sandboxd"
)

// Reasons a WatchedTree's scan read or sent the whole tree, in
// tree.Result.Full.
const (
	// NoTreeWatch: the daemon predates watches; every scan is a full one.
	NoTreeWatch = "sandboxd cannot watch trees (an older daemon): full scan"
	// TreeWatchRenewed: the daemon no longer knew the watch (it was
	// replaced by a restart or reconnect), so a new one read everything.
	TreeWatchRenewed = "sandboxd lost the watch (the daemon restarted): watching again"
)

// WatchedTree follows one root in the sandbox through the daemon's
// watches: each Scan asks for what changed since the answer it holds and
// merges it in, so it returns what a full scan would while only the
// changes cross the connection. It starts the daemon's watch at its first
// Scan; a daemon without watches (404) gets full scans for good, and a
// daemon that lost the watch (404 on the scan: it restarted) gets a new
// watch and a full scan, never a delta against a base it does not have.
type WatchedTree struct {
	c    *Client
	root string
	opt  filetree.ScanOptions // Exclude only: what the watch was made with

	mu     sync.Mutex
	id     string // the daemon's watch; "" before the first scan or after losing it
	gen    int64  // generation of last
	last   []filetree.Entry
	plain  bool // the daemon has no watches
	closed bool
}

// WatchTree returns a WatchedTree of root; nothing is sent before its
// first Scan. Include is not supported.
func (c *Client) WatchTree(root string, opt filetree.ScanOptions) (*WatchedTree, error) {
	if len(opt.Include) > 0 {
		return nil, fmt.Errorf("watch %s: %w: it names included paths", root, filetree.ErrUnwatchable)
	}
	return &WatchedTree{c: c, root: root, opt: filetree.ScanOptions{Exclude: slices.Clone(opt.Exclude)}}, nil
}

// Scan lists the root as Client.TreeScan would with the watch's Exclude
// and opt's Known and TrustBefore (which only the first scan of a daemon's
// watch sends: later ones use the daemon's own previous answer).
func (w *WatchedTree) Scan(ctx context.Context, opt filetree.ScanOptions) (filetree.Result, error) {
	w.mu.Lock()
	defer w.mu.Unlock()
	if w.closed {
		return filetree.Result{}, fmt.Errorf("scan %s: watch closed", w.root)
	}
	opt.Include, opt.Exclude = nil, w.opt.Exclude
	if w.plain {
		return w.plainScan(ctx, opt)
	}
	renewed := false
	for {
		if w.id == "" {
			id, err := w.c.treeWatch(ctx, w.root, w.opt)
			if isNoRoute(err) {
				w.plain = true
				return w.plainScan(ctx, opt)
			}
			if errors.Is(err, errdefs.ErrConflict) || errors.Is(err, errdefs.ErrInvalid) {
				// Refused (too many watches, say): this scan is a full
				// one; the next asks again.
				res, serr := w.c.TreeScan(ctx, w.root, opt)
				res.Full = "sandboxd would not watch the tree: " + err.Error()
				return res, serr
			}
			if err != nil {
				return filetree.Result{}, err
			}
			w.id, w.gen, w.last = id, 0, nil
		}
		req := sandboxd.TreeScanRequest{Root: w.root, Options: opt, Watch: w.id, Generation: w.gen}
		if w.gen > 0 {
			req.Options.Known, req.Options.TrustBefore = nil, 0 // the daemon has its own
		}
		resp, err := w.c.treeScan(ctx, req)
		if isNoRoute(err) && !renewed {
			w.id, renewed = "", true
			continue
		}
		if err != nil {
			return filetree.Result{}, err
		}
		res := resp.Result
		switch {
		case resp.Generation == 0:
			// A daemon older than watches replaced this one: it answered
			// with a plain, whole scan.
			w.plain, w.id, w.last = true, "", nil
			res.Full = NoTreeWatch
			return res, nil
		case resp.Base != 0:
			if resp.Base != w.gen || w.last == nil {
				w.id = "" // never trust this watch again
				return filetree.Result{}, fmt.Errorf("scan %s: sandboxd sent changes since generation %d, this client holds %d", w.root, resp.Base, w.gen)
			}
			if res.Entries, err = filetree.Apply(w.last, resp.Entries, resp.Removed); err != nil {
				w.id = ""
				return filetree.Result{}, fmt.Errorf("scan %s: %w", w.root, err)
			}
		}
		if renewed {
			res.Full = TreeWatchRenewed
		}
		w.gen, w.last = resp.Generation, res.Entries
		// The caller may keep or reorder what it gets; the base stays ours.
		res.Entries = slices.Clone(res.Entries)
		return res, nil
	}
}

func (w *WatchedTree) plainScan(ctx context.Context, opt filetree.ScanOptions) (filetree.Result, error) {
	res, err := w.c.TreeScan(ctx, w.root, opt)
	res.Full = NoTreeWatch
	return res, err
}

// Close ends the daemon's watch (best effort: a daemon that is gone
// freed it already).
func (w *WatchedTree) Close() error {
	w.mu.Lock()
	defer w.mu.Unlock()
	if w.closed {
		return nil
	}
	w.closed = true
	id := w.id
	w.id, w.last = "", nil
	if id == "" {
		return nil
	}
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	resp, err := w.c.do(ctx, http.MethodDelete, "/v1/tree/watch/"+url.PathEscape(id), nil, nil)
	if err != nil {
		return err
	}
	return resp.Body.Close()
}

// isNoRoute reports whether err is the daemon's own 404: an unknown route
// (a daemon older than watches) or an unknown watch (a daemon that
// restarted). A proxy's 404 is not: the client refreshes and retries it.
func isNoRoute(err error) bool {
	var se *StatusError
	return errors.As(err, &se) && se.Status == http.StatusNotFound && !se.FromProxy
}

func (c *Client) treeWatch(ctx context.Context, root string, opt filetree.ScanOptions) (string, error) {
	body, err := json.Marshal(sandboxd.TreeWatchRequest{Root: root, Options: opt})
	if err != nil {
		return "", err
	}
	resp, err := c.do(ctx, http.MethodPost, "/v1/tree/watch", nil, body)
	if err != nil {
		return "", err
	}
	defer resp.Body.Close()
	var v sandboxd.TreeWatchResponse
	if err := json.NewDecoder(resp.Body).Decode(&v); err != nil {
		return "", fmt.Errorf("sandboxd tree watch: decode: %w", err)
	}
	if v.ID == "" {
		return "", errors.New("sandboxd tree watch: the answer has no id")
	}
	return v.ID, nil
}
