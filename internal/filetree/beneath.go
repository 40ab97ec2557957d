package filetree

import (
	"cmp"
	"crypto/rand"
	"encoding/hex"
	"errors"
	"fmt"
	"io"
	"io/fs"
	"os"
	"path"
	"strings"

	"golang.org/x/sys/unix"
)

// Files the runner writes or reads below a sandbox's directories (its
// workdir, $HOME, the agent folder) are reached from the root's
// descriptor one path component at a time, each opened with O_NOFOLLOW:
// a symlink the agent planted anywhere in the path, also one swapped in
// while the runner walks, is never followed, whether it points out of the
// root or not. The root itself is the provider's and trusted.

// ErrLink is what a path refused because of a symlink (or a
// non-directory) in its parents wraps.
var ErrLink = errors.New("is a symlink or not a directory; the runner never writes or reads through links under a sandbox root")

var errNotRegular = errors.New("is not a regular file")

// openDir opens the directory rel (a cleaned slash path, "" or "." for the
// root) beneath root without following a symlink in any component. With
// dirMode non-zero, missing directories are made with it (less the umask),
// and given to owner when it is set.
func openDir(root, rel string, dirMode uint32, owner *Owner) (int, error) {
	fd, err := unix.Open(root, unix.O_RDONLY|unix.O_DIRECTORY|unix.O_CLOEXEC, 0)
	if err != nil {
		return -1, &fs.PathError{Op: "open", Path: root, Err: err}
	}
	if rel == "" || rel == "." {
		return fd, nil
	}
	done := 0
	for name := range strings.SplitSeq(rel, "/") {
		done += len(name) + 1
		next, err := openDirAt(fd, name, dirMode, owner)
		unix.Close(fd)
		if err != nil {
			at := rel[:done-1]
			if errors.Is(err, unix.ELOOP) || errors.Is(err, unix.ENOTDIR) {
				return -1, fmt.Errorf("%s %w (%w)", at, ErrLink, err)
			}
			return -1, &fs.PathError{Op: "open", Path: at, Err: err}
		}
		fd = next
	}
	return fd, nil
}

func openDirAt(dirfd int, name string, dirMode uint32, owner *Owner) (int, error) {
	const flags = unix.O_RDONLY | unix.O_DIRECTORY | unix.O_NOFOLLOW | unix.O_CLOEXEC
	fd, err := unix.Openat(dirfd, name, flags, 0)
	if dirMode == 0 || !errors.Is(err, unix.ENOENT) {
		return fd, err
	}
	made := unix.Mkdirat(dirfd, name, dirMode)
	if made != nil && !errors.Is(made, unix.EEXIST) {
		return -1, made
	}
	if fd, err = unix.Openat(dirfd, name, flags, 0); err != nil {
		return -1, err
	}
	if made == nil && owner != nil {
		if err := unix.Fchown(fd, owner.UID, owner.GID); err != nil {
			unix.Close(fd)
			return -1, err
		}
	}
	return fd, nil
}

// WriteFile writes r's bytes as the regular file rel (a relative slash
// path) beneath root, with mode (permission and setuid/setgid/sticky
// bits) and, when owner is set, that owner. Missing parents are created
// with dirMode (less the umask).
// What stands at rel is replaced, never written through: the content goes
// to a new file that is renamed over it, so a planted symlink (or hard
// link) is swapped for a regular file. A symlink or file among the parents
// is refused with an error naming it (ErrLink); so is a directory at rel.
func WriteFile(root, rel string, r io.Reader, mode, dirMode uint32, owner *Owner) error {
	c, err := Clean(rel)
	if err != nil {
		return err
	}
	dir, name := path.Split(c)
	dirfd, err := openDir(root, strings.TrimSuffix(dir, "/"), cmp.Or(dirMode, 0o755), owner)
	if err != nil {
		return fmt.Errorf("write %s: %w", c, err)
	}
	defer unix.Close(dirfd)
	var nonce [6]byte
	_, _ = rand.Read(nonce[:])
	tmp := name + ".runner-tmp-" + hex.EncodeToString(nonce[:])
	fd, err := unix.Openat(dirfd, tmp, unix.O_WRONLY|unix.O_CREAT|unix.O_EXCL|unix.O_NOFOLLOW|unix.O_CLOEXEC, 0o600)
	if err != nil {
		return fmt.Errorf("write %s: %w", c, err)
	}
	f := os.NewFile(uintptr(fd), path.Join(dir, tmp))
	_, err = io.Copy(f, r)
	if err == nil {
		err = unix.Fchmod(fd, mode&0o7777) // not filtered by the umask
	}
	if err == nil && owner != nil {
		err = unix.Fchown(fd, owner.UID, owner.GID)
	}
	if cerr := f.Close(); err == nil {
		err = cerr
	}
	if err == nil {
		err = unix.Renameat(dirfd, tmp, dirfd, name)
		if errors.Is(err, unix.EISDIR) || errors.Is(err, unix.ENOTEMPTY) || errors.Is(err, unix.EEXIST) {
			err = fmt.Errorf("a directory stands there: %w", err)
		}
	}
	if err != nil {
		_ = unix.Unlinkat(dirfd, tmp, 0)
		return fmt.Errorf("write %s: %w", c, err)
	}
	return nil
}

// Open opens the regular file rel beneath root for reading without
// following a symlink anywhere in its path: a link at rel or among its
// parents is refused with an error naming it (ErrLink).
func Open(root, rel string) (*os.File, error) {
	c, err := Clean(rel)
	if err != nil {
		return nil, err
	}
	dir, name := path.Split(c)
	dirfd, err := openDir(root, strings.TrimSuffix(dir, "/"), 0, nil)
	if err != nil {
		return nil, fmt.Errorf("open %s: %w", c, err)
	}
	defer unix.Close(dirfd)
	f, err := openFileAt(dirfd, name, c)
	if err != nil {
		return nil, fmt.Errorf("open %s: %w", c, err)
	}
	return f, nil
}

// openFileAt opens the regular file name in dirfd, refusing a symlink and
// anything else that is not a regular file (a FIFO would block the
// reader); rel names it in errors.
func openFileAt(dirfd int, name, rel string) (*os.File, error) {
	fd, err := unix.Openat(dirfd, name, unix.O_RDONLY|unix.O_NOFOLLOW|unix.O_NONBLOCK|unix.O_CLOEXEC, 0)
	if errors.Is(err, unix.ELOOP) {
		return nil, fmt.Errorf("%s %w", rel, ErrLink)
	}
	if err != nil {
		return nil, &fs.PathError{Op: "open", Path: rel, Err: err}
	}
	var st unix.Stat_t
	if err := unix.Fstat(fd, &st); err != nil {
		unix.Close(fd)
		return nil, err
	}
	if st.Mode&unix.S_IFMT != unix.S_IFREG {
		unix.Close(fd)
		return nil, fmt.Errorf("%s %w", rel, errNotRegular)
	}
	return os.NewFile(uintptr(fd), rel), nil
}
