package local

import (
	"bufio"
	"context"
	"errors"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"sync"

	"golang.org/x/sys/unix"

	"github.com/agentrunner/runner/internal/errdefs"
)

// Disk quotas. Each sandbox's writable directories (workspace, $HOME, /tmp,
// the agent folder) live on an ext4 image of Config.DiskMB, sparse,
// loop-mounted on the host where they were, so the runner reads and syncs
// them as before and a sandbox that fills its image gets ENOSPC while the
// data dir keeps its space. A loop image works on any filesystem under the
// data dir (project quotas need XFS, or ext4 with the quota feature, mounted
// prjquota); it needs root (CAP_SYS_ADMIN), /dev/loop-control and
// mkfs.ext4. A sandbox with a Spec.StateKey keeps its image beside its
// state dir (<key>.img) for the next one; others drop theirs. A caller's
// own Spec.Workdir (`runner run -workdir`) is the caller's directory and
// is not capped.
//
// Config.ReserveMB keeps the store's margin: a sandbox is refused when the
// free space of the images' filesystem, less what the mounted images may
// still grow by and the new one's quota, falls under it, so sandboxes
// together can never take the space the store needs to commit a turn.
type disk struct {
	quota   int64 // bytes per image
	reserve int64 // bytes kept free on the filesystem under dir
	dir     string
	mkfs    string
	mount   string
	// free is the space left on dir's filesystem; a field for tests.
	free func(dir string) (int64, error)

	mu     sync.Mutex
	mounts map[string]*diskMount // by mount point
}

// diskMount is one mounted image. Its lock (an flock on <image>.lock) is
// held while it is mounted, so a sweep by another runner process on the
// same data dir (`runner run` beside a service) tells a live disk from one
// a killed runner left.
type diskMount struct {
	refs int // sandboxes using it
	lock *os.File
}

func newDisk(cfg Config) (*disk, error) {
	d := &disk{quota: int64(cfg.DiskMB) << 20, dir: cfg.Dir, mounts: map[string]*diskMount{}, free: freeSpace}
	if cfg.ReserveMB > 0 {
		d.reserve = int64(cfg.ReserveMB) << 20
	}
	var err error
	if d.mkfs, err = lookSbin("mkfs.ext4"); err != nil {
		return nil, fmt.Errorf("mkfs.ext4 (apt-get install e2fsprogs): %w", err)
	}
	if d.mount, err = lookSbin("mount"); err != nil {
		return nil, fmt.Errorf("mount (util-linux): %w", err)
	}
	if err := unix.Access("/dev/loop-control", unix.R_OK|unix.W_OK); err != nil {
		return nil, fmt.Errorf("/dev/loop-control: %w (in a container: --device /dev/loop-control and the loop devices, and CAP_SYS_ADMIN)", err)
	}
	d.sweep()
	return d, nil
}

// lookSbin finds a system tool in PATH or in the sbin directories, which a
// service's PATH often lacks.
func lookSbin(name string) (string, error) {
	path, err := exec.LookPath(name)
	if err == nil {
		return path, nil
	}
	for _, dir := range []string{"/usr/sbin", "/sbin", "/usr/bin", "/bin"} {
		if p := filepath.Join(dir, name); unix.Access(p, unix.X_OK) == nil {
			return p, nil
		}
	}
	return "", err
}

// sweep detaches the disks a killed runner left mounted under dir (their
// lock is free) and removes the per-sandbox images no process holds.
// Other mounts there (rclone's) and disks a live process holds are left.
func (d *disk) sweep() {
	detachStale(d.dir)
	olds, _ := filepath.Glob(filepath.Join(d.dir, "local-*", "disk.img"))
	for _, img := range olds {
		if lock, err := lockImage(img); err == nil || errors.Is(err, os.ErrNotExist) {
			_ = os.Remove(img)
			if lock != nil {
				unlock(lock)
			}
		}
	}
}

// detachStale detaches the sandbox disks mounted under dir whose lock no
// process holds (their runner was killed), and reports how many.
func detachStale(dir string) int {
	n := 0
	for _, m := range ext4MountsUnder(dir) {
		lock, err := lockImage(image(m))
		if err != nil {
			continue // held, or not one of these disks
		}
		if unix.Unmount(m, unix.MNT_DETACH) == nil {
			n++
		}
		unlock(lock)
	}
	return n
}

// lockImage takes the lock of img, which must exist; it fails when
// another process holds the lock.
func lockImage(img string) (*os.File, error) {
	if _, err := os.Stat(img); err != nil {
		return nil, err
	}
	f, err := os.OpenFile(img+".lock", os.O_RDWR|os.O_CREATE, 0o600)
	if err != nil {
		return nil, err
	}
	if err := unix.Flock(int(f.Fd()), unix.LOCK_EX|unix.LOCK_NB); err != nil {
		f.Close()
		return nil, err
	}
	return f, nil
}

func unlock(f *os.File) {
	_ = os.Remove(f.Name())
	_ = f.Close()
}

// ext4MountsUnder lists the ext4 mount points under dir, deepest first.
func ext4MountsUnder(dir string) []string {
	f, err := os.Open("/proc/self/mountinfo")
	if err != nil {
		return nil
	}
	defer f.Close()
	var out []string
	sc := bufio.NewScanner(f)
	for sc.Scan() {
		pre, post, _ := strings.Cut(sc.Text(), " - ")
		fields := strings.Fields(pre)
		if len(fields) > 4 && strings.HasPrefix(post, "ext4 ") {
			if p := unescape(fields[4]); within(p, dir) && p != dir {
				out = append([]string{p}, out...)
			}
		}
	}
	return out
}

// unescape undoes mountinfo's octal escapes of a path.
func unescape(s string) string {
	return strings.NewReplacer(`\040`, " ", `\011`, "\t", `\012`, "\n", `\134`, `\`).Replace(s)
}

// image is where the image of the disk mounted at dir lives: beside a
// state dir, inside a sandbox's own root otherwise (disk.img next to the
// mount point "disk").
func image(dir string) string {
	if filepath.Base(dir) == "disk" {
		return filepath.Join(filepath.Dir(dir), "disk.img")
	}
	return dir + ".img"
}

// acquire mounts the disk for dir, making its image first if there is
// none, or counts one more user of a disk mounted already.
func (d *disk) acquire(ctx context.Context, dir string) error {
	d.mu.Lock()
	defer d.mu.Unlock()
	if m := d.mounts[dir]; m != nil {
		m.refs++
		return nil
	}
	if err := d.checkReserve(); err != nil {
		return err
	}
	img := image(dir)
	fresh := false
	if _, err := os.Stat(img); errors.Is(err, os.ErrNotExist) {
		if err := d.makeImage(ctx, img); err != nil {
			return err
		}
		fresh = true
	}
	lock, err := lockImage(img)
	if err != nil {
		return fmt.Errorf("disk quota: %s is in use by another runner process on this data dir: %w", img, err)
	}
	ok := false
	defer func() {
		if !ok {
			unlock(lock)
		}
	}()
	// A state dir from before quotas: its files move onto the new disk.
	var legacy string
	if ents, err := os.ReadDir(dir); err == nil && len(ents) > 0 && fresh {
		legacy = dir + ".moving"
		if err := os.Rename(dir, legacy); err != nil {
			return fmt.Errorf("disk quota: %w", err)
		}
	}
	if err := os.MkdirAll(dir, 0o700); err != nil {
		return fmt.Errorf("disk quota: %w", err)
	}
	// noinit_itable: the kernel would otherwise zero the inode tables in
	// the background, growing every sparse image by them.
	out, err := exec.CommandContext(ctx, d.mount, "-t", "ext4", "-o", "loop,nosuid,nodev,noatime,discard,noinit_itable", img, dir).CombinedOutput()
	if err != nil {
		if legacy != "" { // as it was
			_ = os.Remove(dir)
			_ = os.Rename(legacy, dir)
			_ = os.Remove(img)
		}
		return fmt.Errorf("disk quota: mount %s: %w: %s", img, err, strings.TrimSpace(string(out)))
	}
	if err := os.Chmod(dir, 0o700); err != nil {
		_ = unix.Unmount(dir, unix.MNT_DETACH)
		return fmt.Errorf("disk quota: %w", err)
	}
	_ = os.Remove(filepath.Join(dir, "lost+found"))
	if legacy != "" {
		if out, err := exec.CommandContext(ctx, "cp", "-a", legacy+"/.", dir+"/").CombinedOutput(); err != nil {
			_ = unix.Unmount(dir, unix.MNT_DETACH)
			return fmt.Errorf("disk quota: move %s onto its disk: %w: %s", legacy, err, strings.TrimSpace(string(out)))
		}
		_ = os.RemoveAll(legacy)
	}
	d.mounts[dir] = &diskMount{refs: 1, lock: lock}
	ok = true
	return nil
}

func freeSpace(dir string) (int64, error) {
	var st unix.Statfs_t
	if err := unix.Statfs(dir, &st); err != nil {
		return 0, fmt.Errorf("statfs %s: %w", dir, err)
	}
	return int64(st.Bavail) * st.Bsize, nil
}

func (d *disk) makeImage(ctx context.Context, img string) error {
	if err := os.MkdirAll(filepath.Dir(img), 0o700); err != nil {
		return fmt.Errorf("disk quota: %w", err)
	}
	f, err := os.OpenFile(img, os.O_RDWR|os.O_CREATE|os.O_EXCL, 0o600)
	if err != nil {
		return fmt.Errorf("disk quota: %w", err)
	}
	err = f.Truncate(d.quota)
	if cerr := f.Close(); err == nil {
		err = cerr
	}
	if err == nil {
		var out []byte
		// No reserved blocks: the sandbox may use all of its quota.
		out, err = exec.CommandContext(ctx, d.mkfs, "-q", "-F", "-m", "0", "-E", "lazy_itable_init=1,lazy_journal_init=1,nodiscard", img).CombinedOutput()
		if err != nil {
			err = fmt.Errorf("%s: %w: %s", d.mkfs, err, strings.TrimSpace(string(out)))
		}
	}
	if err != nil {
		_ = os.Remove(img)
		return fmt.Errorf("disk quota: make %s: %w", img, err)
	}
	return nil
}

// checkReserve refuses a new disk that, filled, would leave the
// filesystem under the reserve. Called with d.mu held.
func (d *disk) checkReserve() error {
	free, err := d.free(d.dir)
	if err != nil {
		return fmt.Errorf("disk quota: %w", err)
	}
	committed := d.quota // the new disk, filled
	for m := range d.mounts {
		if n, err := freeSpace(m); err == nil {
			committed += n // what it may still grow by
		}
	}
	if free-committed < d.reserve {
		return errdefs.With(errdefs.ErrUnavailable, fmt.Errorf("no room for another sandbox: %s has %d MB free, %d MB of it promised to the sandboxes' disks (AGENTA_RUNNER_LOCAL_DISK_MB=%d each), and AGENTA_RUNNER_DISK_RESERVE_MB=%d must stay free for the session store; free space there, wait for sandboxes to end, or lower AGENTA_RUNNER_LOCAL_DISK_MB",
			d.dir, free>>20, committed>>20, d.quota>>20, d.reserve>>20))
	}
	return nil
}

// release drops one user of the disk at dir, unmounting it after the last;
// drop also removes its image.
func (d *disk) release(dir string, drop bool) error {
	d.mu.Lock()
	defer d.mu.Unlock()
	m := d.mounts[dir]
	if m == nil {
		return nil // removed already (RemoveState)
	}
	if m.refs > 1 {
		m.refs--
		return nil
	}
	delete(d.mounts, dir)
	err := d.unmount(dir, drop)
	unlock(m.lock)
	return err
}

// remove unmounts the disk at dir whoever still uses it, and removes its
// image (RemoveState).
func (d *disk) remove(dir string) error {
	d.mu.Lock()
	defer d.mu.Unlock()
	m := d.mounts[dir]
	delete(d.mounts, dir)
	err := d.unmount(dir, true)
	if m != nil {
		unlock(m.lock)
	}
	return err
}

func (d *disk) unmount(dir string, drop bool) error {
	err := unix.Unmount(dir, 0)
	if errors.Is(err, unix.EBUSY) {
		err = unix.Unmount(dir, unix.MNT_DETACH) // freed once the last file closes
	}
	if errors.Is(err, unix.EINVAL) || errors.Is(err, unix.ENOENT) {
		err = nil // not mounted
	}
	if err != nil {
		return fmt.Errorf("disk quota: unmount %s: %w", dir, err)
	}
	if drop {
		if err := os.Remove(image(dir)); err != nil && !errors.Is(err, os.ErrNotExist) {
			return fmt.Errorf("disk quota: %w", err)
		}
	}
	return nil
}
