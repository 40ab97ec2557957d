package client

import (
	"archive/tar"
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net/http"
	"net/url"

	"github.com/agentrunner/runner/internal/filetree"
	"github.com/agentrunner/runner/internal/sandboxd"
)

// importBatch is the size of one import request: large enough to amortise
// the round trip, small enough to be retried whole after a dropped
// connection.
const importBatch = 16 << 20

// TreeScan lists root in the sandbox, hashing files there.
func (c *Client) TreeScan(ctx context.Context, root string, opt filetree.ScanOptions) (filetree.Result, error) {
	resp, err := c.treeScan(ctx, sandboxd.TreeScanRequest{Root: root, Options: opt})
	return resp.Result, err
}

// treeScan is one POST /v1/tree/scan; a plain scan's answer is a
// TreeScanResponse with only its Result set.
func (c *Client) treeScan(ctx context.Context, req sandboxd.TreeScanRequest) (sandboxd.TreeScanResponse, error) {
	body, err := json.Marshal(req)
	if err != nil {
		return sandboxd.TreeScanResponse{}, err
	}
	resp, err := c.do(ctx, http.MethodPost, "/v1/tree/scan", nil, body)
	if err != nil {
		return sandboxd.TreeScanResponse{}, err
	}
	defer resp.Body.Close()
	var v sandboxd.TreeScanResponse
	if err := json.NewDecoder(resp.Body).Decode(&v); err != nil {
		return sandboxd.TreeScanResponse{}, fmt.Errorf("sandboxd tree scan: decode: %w", err)
	}
	return v, nil
}

// TreeExport streams the named entries of root as tar.
func (c *Client) TreeExport(ctx context.Context, root string, paths []string) (io.ReadCloser, error) {
	body, err := json.Marshal(sandboxd.TreeExportRequest{Root: root, Paths: paths})
	if err != nil {
		return nil, err
	}
	resp, err := c.do(ctx, http.MethodPost, "/v1/tree/export", nil, body)
	if err != nil {
		return nil, err
	}
	return resp.Body, nil
}

// TreeImport applies a tar stream to root, in batches of about
// importBatch bytes, each retried like any request.
func (c *Client) TreeImport(ctx context.Context, root string, r io.Reader) error {
	tr := tar.NewReader(r)
	var buf bytes.Buffer
	tw := tar.NewWriter(&buf)
	flush := func() error {
		if err := tw.Close(); err != nil {
			return err
		}
		resp, err := c.do(ctx, http.MethodPut, "/v1/tree/import", url.Values{"root": {root}}, buf.Bytes())
		if err != nil {
			return err
		}
		resp.Body.Close()
		buf.Reset()
		tw = tar.NewWriter(&buf)
		return nil
	}
	n := 0
	for {
		hdr, err := tr.Next()
		if errors.Is(err, io.EOF) {
			break
		}
		if err != nil {
			return fmt.Errorf("import into %s: %w", root, err)
		}
		if err := tw.WriteHeader(hdr); err != nil {
			return err
		}
		if _, err := io.Copy(tw, tr); err != nil {
			return fmt.Errorf("import into %s: %w", root, err)
		}
		n++
		if buf.Len() >= importBatch {
			if err := flush(); err != nil {
				return err
			}
			n = 0
		}
	}
	if n == 0 {
		return nil
	}
	return flush()
}
