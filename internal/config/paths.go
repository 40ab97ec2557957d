package config

import (
	"crypto/sha256"
	"encoding/hex"
	"net/url"
	"os"
	"path/filepath"
	"strings"
)

// RunnerPaths names every host path the runner owns, which no local sandbox
// may see: the data dir (sandboxes, the SQLite files, the replica id, the
// rclone cache and fuse mount points, the tool relay socket), the harness
// dir (sandboxes get it back read-only, as a bind), a directory workspace
// store wherever it lives, the tool relay socket's directory, and
// AGENTA_RUNNER_LOCAL_HIDE. A new path setting belongs here; a test in this
// package fails for a *Dir field left out.
func (c Config) RunnerPaths() []string {
	paths := []string{c.DataDir, c.HarnessDir, c.ToolsSocketDir()}
	if dir := c.StoreDir(); dir != "" {
		paths = append(paths, dir)
	}
	return append(paths, c.Local.Hide...)
}

// StoreDir is the directory of a directory workspace store
// (AGENTA_RUNNER_STORE_URL unset, an absolute path or file:///dir); empty
// for off or S3.
func (c Config) StoreDir() string {
	raw := strings.TrimSpace(c.Workspace.StoreURL)
	switch {
	case raw == "":
		return filepath.Join(c.DataDir, "workspaces")
	case filepath.IsAbs(raw):
		return filepath.Clean(raw)
	}
	if u, err := url.Parse(raw); err == nil && u.Scheme == "file" && u.Host == "" && filepath.IsAbs(u.Path) {
		return filepath.Clean(u.Path)
	}
	return ""
}

// ToolsSocketDir is where the tool relay's unix sockets are made
// (tools-<8 hex>.sock, one per process): in the data dir, or under the
// temporary directory when that path would not fit in sun_path (108 bytes).
func (c Config) ToolsSocketDir() string {
	dir := filepath.Join(c.DataDir, "run")
	if len(filepath.Join(dir, "tools-00000000.sock")) > 100 {
		sum := sha256.Sum256([]byte(c.DataDir))
		dir = filepath.Join(os.TempDir(), "runner-"+hex.EncodeToString(sum[:6]))
	}
	return dir
}
