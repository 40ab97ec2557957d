package filetree

import (
	"archive/tar"
	"context"
	"crypto/rand"
	"encoding/hex"
	"errors"
	"fmt"
	"io"
	"io/fs"
	"os"
	"path"
	"strings"
	"time"

	"golang.org/x/sys/unix"
)

// OpRecord is the PAX record that marks a tar entry as an operation rather
// than content; OpDelete removes the entry's path (recursively).
const (
	OpRecord = "RUNNER.op"
	OpDelete = "delete"
)

// smallFile is the size up to which Export reads a file whole before its
// header is written, so a file that changes while it is read still yields
// a consistent entry.
const smallFile = 16 << 20

// Export writes the named entries of root (relative slash paths) to w as a
// tar stream: regular files with their content, directories, symlinks.
// Paths that no longer exist are left out; the reader sees what was there.
// Entries are reached beneath root without following any symlink (a link
// is exported as a link), so nothing outside the tree is ever read.
func Export(root string, paths []string, w io.Writer) error {
	var parent dirCache
	defer parent.close()
	if _, err := parent.open(root, ""); err != nil {
		return fmt.Errorf("export %s: %w", root, err)
	}
	tw := tar.NewWriter(w)
	for _, p := range paths {
		rel, err := Clean(p)
		if err != nil {
			return err
		}
		dir, name := path.Split(rel)
		dirfd, err := parent.open(root, strings.TrimSuffix(dir, "/"))
		if gone(err) {
			continue // a parent gone, or made a link: not in the tree any more
		}
		if err != nil {
			return fmt.Errorf("export %s: %w", rel, err)
		}
		var st unix.Stat_t
		if err := unix.Fstatat(dirfd, name, &st, unix.AT_SYMLINK_NOFOLLOW); err != nil {
			if errors.Is(err, unix.ENOENT) {
				continue
			}
			return fmt.Errorf("export %s: %w", rel, err)
		}
		hdr := &tar.Header{Name: rel, Mode: int64(modeBits(uint32(st.Mode))), ModTime: time.Unix(0, st.Mtim.Nano()), Format: tar.FormatPAX}
		switch st.Mode & unix.S_IFMT {
		case unix.S_IFREG:
			if err := exportFile(dirfd, name, rel, hdr, tw); err != nil {
				return err
			}
			continue
		case unix.S_IFDIR:
			hdr.Typeflag = tar.TypeDir
		case unix.S_IFLNK:
			t, err := readlinkAt(dirfd, name)
			if gone(err) || errors.Is(err, unix.EINVAL) {
				continue
			}
			if err != nil {
				return fmt.Errorf("export %s: %w", rel, err)
			}
			hdr.Typeflag, hdr.Linkname, hdr.Mode = tar.TypeSymlink, t, 0o777
		default:
			continue
		}
		if err := tw.WriteHeader(hdr); err != nil {
			return err
		}
	}
	return tw.Close()
}

// dirCache holds the last directory Export opened: paths come sorted, so
// most share their parent with the one before.
type dirCache struct {
	rel string
	fd  int
	ok  bool
}

func (c *dirCache) open(root, rel string) (int, error) {
	if c.ok && c.rel == rel {
		return c.fd, nil
	}
	c.close()
	fd, err := openDir(root, rel, 0, nil)
	if err != nil {
		return -1, err
	}
	c.rel, c.fd, c.ok = rel, fd, true
	return fd, nil
}

func (c *dirCache) close() {
	if c.ok {
		unix.Close(c.fd)
		c.ok = false
	}
}

// exportFile writes the regular file name of dirfd; one replaced since its
// stat (by a link, a pipe) or gone is left out, the next scan sees it.
func exportFile(dirfd int, name, rel string, hdr *tar.Header, tw *tar.Writer) error {
	f, err := openFileAt(dirfd, name, rel)
	if err != nil {
		if errors.Is(err, fs.ErrNotExist) || errors.Is(err, ErrLink) || errors.Is(err, errNotRegular) {
			return nil
		}
		return fmt.Errorf("export %s: %w", rel, err)
	}
	defer f.Close()
	info, err := f.Stat()
	if err != nil {
		return fmt.Errorf("export %s: %w", rel, err)
	}
	hdr.Typeflag = tar.TypeReg
	if info.Size() <= smallFile {
		b, err := io.ReadAll(io.LimitReader(f, smallFile+1))
		if err != nil {
			return fmt.Errorf("export %s: %w", rel, err)
		}
		hdr.Size = int64(len(b))
		if err := tw.WriteHeader(hdr); err != nil {
			return err
		}
		_, err = tw.Write(b)
		return err
	}
	hdr.Size = info.Size()
	if err := tw.WriteHeader(hdr); err != nil {
		return err
	}
	n, err := io.CopyN(tw, f, hdr.Size)
	if errors.Is(err, io.EOF) {
		// Shrunk while read: pad, so the stream stays valid; the next scan
		// sees the new content and sends it again.
		_, err = io.CopyN(tw, zeros{}, hdr.Size-n)
	}
	return err
}

type zeros struct{}

func (zeros) Read(p []byte) (int, error) {
	clear(p)
	return len(p), nil
}

// Owner is who imported entries belong to; nil leaves them to the caller.
type Owner struct{ UID, GID int }

// Import applies a tar stream to root, creating root if needed: files are
// written through a temporary file and a rename, directories and symlinks
// created, entries with the delete operation removed. Paths are resolved
// inside root: no entry can write through a symlink or a ".." out of it.
func Import(root string, rd io.Reader, owner *Owner) error {
	if err := os.MkdirAll(root, 0o755); err != nil {
		return fmt.Errorf("import into %s: %w", root, err)
	}
	r, err := os.OpenRoot(root)
	if err != nil {
		return fmt.Errorf("import into %s: %w", root, err)
	}
	defer r.Close()
	tr := tar.NewReader(rd)
	for {
		hdr, err := tr.Next()
		if errors.Is(err, io.EOF) {
			return nil
		}
		if err != nil {
			return fmt.Errorf("import into %s: %w", root, err)
		}
		rel, err := Clean(hdr.Name)
		if err != nil {
			return fmt.Errorf("import into %s: %w", root, err)
		}
		if err := importEntry(r, rel, hdr, tr, owner); err != nil {
			return fmt.Errorf("import %s into %s: %w", rel, root, err)
		}
	}
}

func importEntry(r *os.Root, rel string, hdr *tar.Header, tr io.Reader, owner *Owner) error {
	mode := fs.FileMode(hdr.Mode & 0o777)
	if hdr.PAXRecords[OpRecord] == OpDelete {
		return r.RemoveAll(rel)
	}
	if dir := path.Dir(rel); dir != "." {
		if err := mkdirAll(r, dir, owner); err != nil {
			return err
		}
	}
	switch hdr.Typeflag {
	case tar.TypeDir:
		if info, err := r.Lstat(rel); err == nil && !info.IsDir() {
			if err := r.RemoveAll(rel); err != nil {
				return err
			}
		}
		if err := r.Mkdir(rel, 0o700); err != nil && !errors.Is(err, fs.ErrExist) {
			return err
		}
		if err := r.Chmod(rel, withSpecial(mode, hdr.Mode)); err != nil {
			return err
		}
		return own(r, rel, owner)
	case tar.TypeSymlink:
		if err := r.RemoveAll(rel); err != nil {
			return err
		}
		if err := r.Symlink(hdr.Linkname, rel); err != nil {
			return err
		}
		return own(r, rel, owner)
	case tar.TypeReg:
		if info, err := r.Lstat(rel); err == nil && info.IsDir() {
			if err := r.RemoveAll(rel); err != nil {
				return err
			}
		}
		var nonce [6]byte
		_, _ = rand.Read(nonce[:])
		tmp := rel + ".runner-tmp-" + hex.EncodeToString(nonce[:])
		f, err := r.OpenFile(tmp, os.O_WRONLY|os.O_CREATE|os.O_EXCL, 0o600)
		if err != nil {
			return err
		}
		_, err = io.Copy(f, tr)
		if cerr := f.Close(); err == nil {
			err = cerr
		}
		if err == nil {
			err = r.Chmod(tmp, withSpecial(mode, hdr.Mode))
		}
		if err == nil {
			err = r.Chtimes(tmp, time.Now(), hdr.ModTime)
		}
		if err == nil {
			err = own(r, tmp, owner)
		}
		if err == nil {
			err = r.Rename(tmp, rel)
		}
		if err != nil {
			_ = r.Remove(tmp)
		}
		return err
	}
	return fmt.Errorf("tar entry type %q is not supported", hdr.Typeflag)
}

func withSpecial(m fs.FileMode, raw int64) fs.FileMode {
	if raw&0o4000 != 0 {
		m |= fs.ModeSetuid
	}
	if raw&0o2000 != 0 {
		m |= fs.ModeSetgid
	}
	if raw&0o1000 != 0 {
		m |= fs.ModeSticky
	}
	return m
}

// mkdirAll creates dir and its parents inside r, replacing a non-directory
// in the way (a symlink restored earlier is never followed).
func mkdirAll(r *os.Root, dir string, owner *Owner) error {
	if info, err := r.Lstat(dir); err == nil {
		if info.IsDir() {
			return nil
		}
		if err := r.Remove(dir); err != nil {
			return err
		}
	}
	if parent := path.Dir(dir); parent != "." {
		if err := mkdirAll(r, parent, owner); err != nil {
			return err
		}
	}
	if err := r.Mkdir(dir, 0o755); err != nil && !errors.Is(err, fs.ErrExist) {
		return err
	}
	return own(r, dir, owner)
}

func own(r *os.Root, rel string, owner *Owner) error {
	if owner == nil {
		return nil
	}
	return r.Lchown(rel, owner.UID, owner.GID)
}

// DeleteHeader is the tar header of a delete operation on rel.
func DeleteHeader(rel string) *tar.Header {
	return &tar.Header{Name: rel, Typeflag: tar.TypeReg, Mode: 0o600, Format: tar.FormatPAX, PAXRecords: map[string]string{OpRecord: OpDelete}}
}

// Header is the tar header that recreates e (its content follows for a
// file).
func Header(e Entry) *tar.Header {
	hdr := &tar.Header{Name: e.Path, Mode: int64(e.Mode), Format: tar.FormatPAX}
	switch e.Kind {
	case File:
		hdr.Typeflag, hdr.Size, hdr.ModTime = tar.TypeReg, e.Size, time.Unix(0, e.MTime)
	case Dir:
		hdr.Typeflag = tar.TypeDir
	case Symlink:
		hdr.Typeflag, hdr.Linkname = tar.TypeSymlink, e.Target
	}
	return hdr
}

// Local is a tree on this machine's disk, with the methods the workspace
// sync calls on a sandbox.
type Local struct {
	Owner *Owner // who imported entries belong to; nil: the caller
}

// Scan lists root.
func (l Local) Scan(ctx context.Context, root string, opt ScanOptions) (Result, error) {
	return Scan(root, opt)
}

// Export streams the named entries of root as tar.
func (l Local) Export(ctx context.Context, root string, paths []string) (io.ReadCloser, error) {
	pr, pw := io.Pipe()
	done := make(chan struct{})
	go func() {
		defer close(done)
		pw.CloseWithError(Export(root, paths, pw))
	}()
	return &exportStream{PipeReader: pr, done: done}, nil
}

// exportStream is an export's reading end; Close stops the writer and
// waits for it.
type exportStream struct {
	*io.PipeReader
	done chan struct{}
}

func (e *exportStream) Close() error {
	e.PipeReader.CloseWithError(errors.New("export reader closed"))
	<-e.done
	return nil
}

// Import applies a tar stream to root.
func (l Local) Import(ctx context.Context, root string, r io.Reader) error {
	return Import(root, r, l.Owner)
}
