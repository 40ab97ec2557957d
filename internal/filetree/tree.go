// Package filetree lists, exports and imports a directory tree as the durable
// workspace sync sees it: regular files (with a content hash), directories
// and symlinks, each with its permission bits. It works on the local disk;
// the local sandbox provider and sandboxd (inside remote sandboxes) serve it
// to the runner. Transfers are tar streams; deletions travel in the same
// stream as entries marked with a PAX record.
package filetree

import (
	"crypto/sha256"
	"encoding/hex"
	"fmt"
	"io/fs"
	"path"
	"strings"
)

// Kinds of entries.
const (
	File    = "f"
	Dir     = "d"
	Symlink = "l"
)

// Entry is one path of a tree, relative to its root, slash-separated.
type Entry struct {
	Path   string `json:"p"`
	Kind   string `json:"k"`
	Mode   uint32 `json:"m"` // permission bits (and setuid/setgid/sticky)
	Size   int64  `json:"s,omitempty"`
	MTime  int64  `json:"t,omitempty"` // unix nanoseconds, files only
	Hash   string `json:"h,omitempty"` // sha256 hex of a file's content
	Target string `json:"l,omitempty"` // a symlink's target, verbatim
}

// Same reports whether a and b have the same content and metadata that the
// sync keeps (modification times aside).
func Same(a, b Entry) bool {
	return a.Kind == b.Kind && a.Mode == b.Mode && a.Hash == b.Hash && a.Target == b.Target && a.Size == b.Size
}

// ScanOptions narrows and speeds up a Scan.
type ScanOptions struct {
	// Include, when set, limits the scan to these relative paths (each a
	// file or a subtree); missing ones are skipped.
	Include []string `json:"include,omitempty"`
	// Exclude lists names skipped wherever they appear (".credentials.json",
	// "*.sqlite*": shell patterns matched against the base name), or, with
	// a leading "/", one path relative to the root ("/agent-files").
	Exclude []string `json:"exclude,omitempty"`
	// Known are entries from an earlier scan: a file whose size, mode and
	// modification time are unchanged keeps its hash without being read,
	// if it was last modified before TrustBefore (a file modified in the
	// same instant as that scan may have changed after it was read).
	Known       []Entry `json:"known,omitempty"`
	TrustBefore int64   `json:"trustBefore,omitempty"`
}

// Result is a scan: its entries, sorted by path, and the time (of the
// machine holding the tree) at which it started.
type Result struct {
	Entries []Entry `json:"entries"`
	Time    int64   `json:"time"`
	Hashed  int     `json:"hashed"`         // files read to hash them
	Dirs    int     `json:"dirs,omitempty"` // directories read
	// Full says why a watched scan (Watch.Scan) read every directory
	// rather than only those its events named; empty when it did not, and
	// for a plain Scan.
	Full string `json:"full,omitempty"`
}

// Excluded reports whether rel (slash path) is excluded by patterns.
func Excluded(rel string, patterns []string) bool {
	base := path.Base(rel)
	for _, p := range patterns {
		if anchored, ok := strings.CutPrefix(p, "/"); ok {
			if rel == anchored || strings.HasPrefix(rel, anchored+"/") {
				return true
			}
			continue
		}
		if ok, _ := path.Match(p, base); ok {
			return true
		}
	}
	return false
}

func specialBits(m fs.FileMode) uint32 {
	var b uint32
	if m&fs.ModeSetuid != 0 {
		b |= 0o4000
	}
	if m&fs.ModeSetgid != 0 {
		b |= 0o2000
	}
	if m&fs.ModeSticky != 0 {
		b |= 0o1000
	}
	return b
}

// HashBytes is the hash Scan records for content b.
func HashBytes(b []byte) string {
	s := sha256.Sum256(b)
	return hex.EncodeToString(s[:])
}

// Clean checks that rel is a relative slash path inside a root and returns
// it cleaned.
func Clean(rel string) (string, error) {
	c := path.Clean(rel)
	if rel == "" || path.IsAbs(rel) || c == "." || c == ".." || strings.HasPrefix(c, "../") || strings.Contains(rel, "\x00") {
		return "", fmt.Errorf("path %q: want a relative path inside the tree", rel)
	}
	return c, nil
}
