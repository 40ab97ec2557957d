// Package fs is the workspace store in a directory on the runner's disk:
// the embedded default, so a runner with no object store configured still
// keeps every session's files across sandboxes and restarts. A key is a
// file under the directory; writes go through a temporary file and a
// rename, so a reader never sees half an object.
package fs

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"errors"
	"fmt"
	"io"
	iofs "io/fs"
	"os"
	"path/filepath"
	"sort"
	"strings"

	"github.com/agentrunner/runner/internal/errdefs"
	"github.com/agentrunner/runner/internal/workspace"
)

// tmpSuffix marks objects being written; List skips them.
const tmpSuffix = ".tmp-store-"

// Store keeps objects under a directory.
type Store struct {
	dir string
}

// New returns the store in dir, creating it.
func New(dir string) (*Store, error) {
	if !filepath.IsAbs(dir) {
		return nil, errdefs.Invalidf("workspace store directory %q: want an absolute path", dir)
	}
	if err := os.MkdirAll(dir, 0o700); err != nil {
		return nil, workspace.StoreError("file://"+dir, "create", err)
	}
	return &Store{dir: dir}, nil
}

func (s *Store) String() string { return "file://" + s.dir }

func (s *Store) path(key string) (string, error) {
	if err := workspace.ValidKey(key); err != nil {
		return "", err
	}
	return filepath.Join(s.dir, filepath.FromSlash(key)), nil
}

// Put implements workspace.Store.
func (s *Store) Put(ctx context.Context, key string, r io.Reader, size int64) error {
	p, err := s.path(key)
	if err != nil {
		return err
	}
	if err := os.MkdirAll(filepath.Dir(p), 0o700); err != nil {
		return workspace.StoreError(s.String(), "put "+key, err)
	}
	var nonce [6]byte
	_, _ = rand.Read(nonce[:])
	tmp := p + tmpSuffix + hex.EncodeToString(nonce[:])
	f, err := os.OpenFile(tmp, os.O_WRONLY|os.O_CREATE|os.O_EXCL, 0o600)
	if err != nil {
		return workspace.StoreError(s.String(), "put "+key, err)
	}
	n, err := io.Copy(f, r)
	if err == nil && size >= 0 && n != size {
		err = fmt.Errorf("read %d bytes, want %d", n, size)
	}
	if cerr := f.Close(); err == nil {
		err = cerr
	}
	if err == nil {
		err = os.Rename(tmp, p)
	}
	if err != nil {
		os.Remove(tmp)
		return workspace.StoreError(s.String(), "put "+key, err)
	}
	return nil
}

// Get implements workspace.Store.
func (s *Store) Get(ctx context.Context, key string) (io.ReadCloser, error) {
	p, err := s.path(key)
	if err != nil {
		return nil, err
	}
	f, err := os.Open(p)
	if errors.Is(err, iofs.ErrNotExist) {
		return nil, errdefs.With(errdefs.ErrNotFound, fmt.Errorf("%s: no object %s", s, key))
	}
	if err != nil {
		return nil, workspace.StoreError(s.String(), "get "+key, err)
	}
	if info, err := f.Stat(); err == nil && info.IsDir() {
		f.Close()
		return nil, errdefs.With(errdefs.ErrNotFound, fmt.Errorf("%s: no object %s", s, key))
	}
	return f, nil
}

// Delete implements workspace.Store. Directories left empty are removed
// up to the store's own.
func (s *Store) Delete(ctx context.Context, key string) error {
	p, err := s.path(key)
	if err != nil {
		return err
	}
	if info, err := os.Lstat(p); err == nil && info.IsDir() {
		return nil // a key prefix, not an object
	}
	if err := os.Remove(p); err != nil && !errors.Is(err, iofs.ErrNotExist) {
		return workspace.StoreError(s.String(), "delete "+key, err)
	}
	for dir := filepath.Dir(p); dir != s.dir && strings.HasPrefix(dir, s.dir); dir = filepath.Dir(dir) {
		if os.Remove(dir) != nil {
			break // not empty
		}
	}
	return nil
}

// List implements workspace.Store.
func (s *Store) List(ctx context.Context, prefix string) ([]string, error) {
	if err := workspace.ValidPrefix(prefix); err != nil {
		return nil, err
	}
	// Walk from the deepest directory the prefix names.
	start := s.dir
	if i := strings.LastIndex(prefix, "/"); i >= 0 {
		start = filepath.Join(s.dir, filepath.FromSlash(prefix[:i]))
	}
	var keys []string
	err := filepath.WalkDir(start, func(p string, d iofs.DirEntry, err error) error {
		if err != nil {
			if errors.Is(err, iofs.ErrNotExist) {
				return nil
			}
			return err
		}
		if d.IsDir() || strings.Contains(d.Name(), tmpSuffix) {
			return nil
		}
		rel, err := filepath.Rel(s.dir, p)
		if err != nil {
			return err
		}
		key := filepath.ToSlash(rel)
		if strings.HasPrefix(key, prefix) {
			keys = append(keys, key)
		}
		return nil
	})
	if err != nil {
		return nil, workspace.StoreError(s.String(), "list "+prefix, err)
	}
	sort.Strings(keys)
	return keys, nil
}
