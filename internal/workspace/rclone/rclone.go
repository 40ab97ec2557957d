// Package rclone mounts a workspace store at a directory with `rclone
// mount` (Debian's rclone, FUSE 3), for the optional FUSE mode of durable
// workspaces. rclone never sees the store's lease: it talks S3 to a
// loopback endpoint (Config.Serve, internal/workspace/resign) with keys of
// its own, and the endpoint re-signs. Writes go to rclone's disk cache and
// are uploaded as soon as a file is closed (--vfs-write-back 0s); Flush
// waits until rclone's upload queue is empty, so a turn's files are in the
// store before its result returns.
//
// rclone keeps a file dirty in its cache until it is uploaded, and
// retries a failed upload on its own; Flush fails when the store has
// kept failing (the loopback endpoint's Err) or its context ends.
//
// Limits of rclone 1.60 on S3, stated rather than papered over: symlinks
// cannot be created in the mount (the call fails with an error; rclone's
// --links is for its local backend only), and modes, owners and empty
// directories are not kept (every file shows the mount's owner and
// 0644/0755; an empty directory exists only until the mount ends).
package rclone

import (
	"bytes"
	"context"
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"io/fs"
	"log/slog"
	"os"
	"os/exec"
	"path/filepath"
	"runtime"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"time"

	"github.com/agentrunner/runner/internal/errdefs"
	"github.com/agentrunner/runner/internal/logkey"
	"github.com/agentrunner/runner/internal/workspace"
)

// Config is how mounts are made.
type Config struct {
	Binary     string // rclone; default found on PATH
	Fusermount string // fusermount3; default found on PATH
	// CacheDir holds each mount's write cache (a directory per mounted
	// prefix, so a mount that could not upload resumes where it stopped).
	CacheDir string
	// UID and GID own the mounted files as the sandbox sees them; zero:
	// the runner's.
	UID, GID int
	// Serve starts the loopback endpoint in front of a store's leases.
	Serve func(ctx context.Context, leases workspace.Leaser, prefix string) (workspace.Loopback, error)
	Log   *slog.Logger
	// ReadyTimeout bounds waiting for a mount to appear; default 30s.
	ReadyTimeout time.Duration
}

// Check finds what fuse mode needs on this host and says how to get what
// is missing.
func Check(cfg Config) (Config, error) {
	const v = "AGENTA_RUNNER_WORKSPACE_MODE=fuse"
	var err error
	if cfg.Binary == "" {
		if cfg.Binary, err = exec.LookPath("rclone"); err != nil {
			return cfg, errdefs.Invalidf("%s needs rclone on PATH (Debian: apt-get install rclone), or set AGENTA_RUNNER_WORKSPACE_MODE=sync", v)
		}
	}
	if out, err := exec.Command(cfg.Binary, "version").CombinedOutput(); err != nil {
		return cfg, errdefs.Invalidf("%s: %s version: %v: %s", v, cfg.Binary, err, strings.TrimSpace(string(out)))
	}
	if cfg.Fusermount == "" {
		if cfg.Fusermount, err = exec.LookPath("fusermount3"); err != nil {
			return cfg, errdefs.Invalidf("%s needs fusermount3 on PATH (Debian: apt-get install fuse3), or set AGENTA_RUNNER_WORKSPACE_MODE=sync", v)
		}
	}
	f, err := os.OpenFile("/dev/fuse", os.O_RDWR, 0)
	if err != nil {
		return cfg, errdefs.Invalidf("%s needs /dev/fuse (%v); in a container run it with --device /dev/fuse --cap-add SYS_ADMIN, or set AGENTA_RUNNER_WORKSPACE_MODE=sync", v, err)
	}
	f.Close()
	if os.Geteuid() != 0 {
		// The sandbox's user is not the runner's: the mount must allow
		// other users, which FUSE grants a non-root user only so.
		if b, err := os.ReadFile("/etc/fuse.conf"); err != nil || !userAllowOther(string(b)) {
			return cfg, errdefs.Invalidf("%s as a non-root user needs user_allow_other in /etc/fuse.conf (the sandbox's user must reach the mount), or set AGENTA_RUNNER_WORKSPACE_MODE=sync", v)
		}
	}
	if cfg.CacheDir == "" || !filepath.IsAbs(cfg.CacheDir) {
		return cfg, errdefs.Invalidf("%s: the rclone cache directory %q must be an absolute path", v, cfg.CacheDir)
	}
	return cfg, nil
}

func userAllowOther(conf string) bool {
	for _, line := range strings.Split(conf, "\n") {
		if strings.TrimSpace(line) == "user_allow_other" {
			return true
		}
	}
	return false
}

// Mounter makes rclone mounts. It implements workspace.Mounter.
type Mounter struct {
	cfg Config
}

// New returns a mounter; cfg should have passed Check.
func New(cfg Config) *Mounter {
	if cfg.Log == nil {
		cfg.Log = slog.New(slog.DiscardHandler)
	}
	if cfg.ReadyTimeout <= 0 {
		cfg.ReadyTimeout = 30 * time.Second
	}
	return &Mounter{cfg: cfg}
}

// Mount implements workspace.Mounter.
func (m *Mounter) Mount(ctx context.Context, s workspace.Store, dir string) (workspace.MountPoint, error) {
	leases, prefix, ok := workspace.LeasedPrefix(s)
	if !ok {
		return nil, errdefs.Unprocessablef("fuse mode mounts S3 stores; %s is not one (set AGENTA_RUNNER_WORKSPACE_MODE=sync)", s)
	}
	if m.cfg.Serve == nil {
		return nil, errors.New("rclone mounter: no loopback endpoint")
	}
	lb, err := m.cfg.Serve(ctx, leases, prefix)
	if err != nil {
		return nil, err
	}
	mp, err := m.start(ctx, s.String(), lb, dir)
	if err != nil {
		_ = lb.Close()
		return nil, err
	}
	return mp, nil
}

func (m *Mounter) start(ctx context.Context, store string, lb workspace.Loopback, dir string) (*mountPoint, error) {
	if stale(dir) {
		_ = exec.Command(m.cfg.Fusermount, "-uz", dir).Run()
	}
	if err := os.MkdirAll(dir, 0o755); err != nil {
		return nil, fmt.Errorf("mount point %s: %w", dir, err)
	}
	rem := lb.Remote()
	sum := sha256.Sum256([]byte(rem.Path))
	cache := filepath.Join(m.cfg.CacheDir, hex.EncodeToString(sum[:12]))
	if err := os.MkdirAll(cache, 0o700); err != nil {
		return nil, fmt.Errorf("rclone cache: %w", err)
	}
	mp := &mountPoint{
		m: m, lb: lb, store: store, dir: dir, cache: cache, exited: make(chan struct{}),
	}
	args := []string{
		"mount", "ws:" + rem.Path, dir,
		"--config", filepath.Join(cache, "rclone.conf"), // never the runner user's own
		"--cache-dir", cache,
		"--vfs-cache-mode", "writes",
		"--vfs-write-back", "0s", // upload as soon as a file is closed
		"--dir-cache-time", "1h", "--poll-interval", "0", // the sandbox is the prefix's only writer
		"--allow-other", "--default-permissions", "--umask", "022",
		"--exclude", "/" + workspace.MetaDir + "/**",
		"--s3-upload-cutoff", "8Mi", "--s3-chunk-size", "8Mi", // bodies the endpoint can replay
		"--log-level", "NOTICE",
	}
	if m.cfg.UID > 0 {
		args = append(args, "--uid", strconv.Itoa(m.cfg.UID), "--gid", strconv.Itoa(max(m.cfg.GID, 0)))
	}
	cmd := exec.Command(m.cfg.Binary, args...)
	cmd.Env = []string{
		"PATH=" + os.Getenv("PATH"),
		"HOME=" + cache,
		"RCLONE_CONFIG_WS_TYPE=s3",
		"RCLONE_CONFIG_WS_PROVIDER=Other",
		"RCLONE_CONFIG_WS_ENV_AUTH=false",
		"RCLONE_CONFIG_WS_ENDPOINT=" + rem.URL,
		"RCLONE_CONFIG_WS_REGION=" + rem.Region,
		"RCLONE_CONFIG_WS_ACCESS_KEY_ID=" + rem.AccessKey,
		"RCLONE_CONFIG_WS_SECRET_ACCESS_KEY=" + rem.SecretKey,
		"RCLONE_CONFIG_WS_FORCE_PATH_STYLE=true",
		"RCLONE_CONFIG_WS_NO_CHECK_BUCKET=true",
	}
	// rclone's output goes to a file, not a pipe: a pipe's reading end
	// dies with the runner, and rclone, writing "signal received" to it,
	// would die of SIGPIPE before it unmounts.
	logf, err := os.OpenFile(filepath.Join(cache, "rclone.log"), os.O_CREATE|os.O_WRONLY|os.O_APPEND, 0o600)
	if err != nil {
		return nil, fmt.Errorf("rclone log: %w", err)
	}
	defer logf.Close() // rclone has its own descriptor once started
	mp.log = logf.Name()
	cmd.Stdout, cmd.Stderr = logf, logf
	// rclone unmounts on SIGTERM: sent when the runner dies (on Linux,
	// procattr_linux.go), so a killed runner leaves no mount behind. The
	// signal follows the thread that started the child, so that thread
	// stays locked until rclone exits.
	cmd.SysProcAttr = procAttr()
	started := make(chan error, 1)
	go func() {
		runtime.LockOSThread()
		defer runtime.UnlockOSThread()
		if err := cmd.Start(); err != nil {
			started <- err
			close(mp.exited)
			return
		}
		started <- nil
		mp.waitErr = cmd.Wait()
		close(mp.exited)
	}()
	if err := <-started; err != nil {
		return nil, fmt.Errorf("start rclone mount: %w", err)
	}
	mp.cmd = cmd
	if err := mp.ready(ctx); err != nil {
		uctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), 15*time.Second)
		defer cancel()
		mp.stop(uctx)
		return nil, err
	}
	m.cfg.Log.Debug("workspace mounted", "dir", dir, "store", store)
	return mp, nil
}

// stale reports a mount point whose FUSE server is gone.
func stale(dir string) bool {
	_, err := os.Stat(dir)
	return errors.Is(err, syscall.ENOTCONN)
}

// mountPoint is one running rclone mount.
type mountPoint struct {
	m     *Mounter
	lb    workspace.Loopback
	store string
	dir   string
	cache string
	cmd   *exec.Cmd
	log   string // rclone's output

	exited  chan struct{}
	waitErr error // set before exited closes

	unmountOnce sync.Once
	unmountErr  error
}

// ready waits until dir is a mount of rclone's.
func (mp *mountPoint) ready(ctx context.Context) error {
	deadline := time.Now().Add(mp.m.cfg.ReadyTimeout)
	for {
		if mounted(mp.dir) {
			return nil
		}
		select {
		case <-mp.exited:
			return mp.exitErr()
		case <-ctx.Done():
			return ctx.Err()
		case <-time.After(20 * time.Millisecond):
		}
		if time.Now().After(deadline) {
			return fmt.Errorf("rclone mount of %s at %s: not mounted after %s: %s", mp.store, mp.dir, mp.m.cfg.ReadyTimeout, logTail(mp.log))
		}
	}
}

func (mp *mountPoint) exitErr() error {
	return workspace.StoreError(mp.store, "fuse mount at "+mp.dir, fmt.Errorf("rclone exited (%v): %s", mp.waitErr, strings.TrimSpace(logTail(mp.log))))
}

// Err implements workspace.MountPoint.
func (mp *mountPoint) Err() error {
	select {
	case <-mp.exited:
		return mp.exitErr()
	default:
	}
	return mp.lb.Err()
}

// SetStore implements workspace.MountPoint.
func (mp *mountPoint) SetStore(s workspace.Store) error {
	l, prefix, ok := workspace.LeasedPrefix(s)
	if !ok {
		return errdefs.Unprocessablef("fuse mode mounts S3 stores; %s is not one", s)
	}
	mp.lb.SetLeases(l, prefix)
	return nil
}

// dirty counts the files written through the mount and not uploaded
// yet: rclone marks an item of its cache dirty (in its metadata on disk)
// at the first write, before the write returns, and clean once the upload
// succeeded. (rclone 1.60's vfs/stats upload counters miss an upload that
// is retrying, so they cannot tell a flushed mount.)
func (mp *mountPoint) dirty() (int, error) {
	n := 0
	err := filepath.WalkDir(filepath.Join(mp.cache, "vfsMeta"), func(p string, d fs.DirEntry, err error) error {
		if errors.Is(err, fs.ErrNotExist) {
			return nil // a file uploaded and evicted meanwhile
		}
		if err != nil || d.IsDir() {
			return err
		}
		b, err := os.ReadFile(p)
		if errors.Is(err, fs.ErrNotExist) {
			return nil
		}
		if err != nil {
			return err
		}
		// rclone rewrites a metadata file in place (truncate, then
		// write): one read mid-rewrite is empty or cut short. Unreadable
		// counts as not yet uploaded, so Flush reads it again rather
		// than take a file it cannot see for uploaded.
		var meta struct{ Dirty bool }
		if err := json.Unmarshal(b, &meta); err != nil || meta.Dirty {
			n++
		}
		return nil
	})
	if errors.Is(err, fs.ErrNotExist) {
		return 0, nil
	}
	return n, err
}

// Flush implements workspace.MountPoint.
func (mp *mountPoint) Flush(ctx context.Context) error {
	wait := 10 * time.Millisecond
	for {
		if err := mp.Err(); err != nil {
			return err
		}
		pending, err := mp.dirty()
		if err != nil {
			return workspace.StoreError(mp.store, "flush the fuse mount", fmt.Errorf("read rclone's cache: %w", err))
		}
		if pending == 0 {
			return nil
		}
		select {
		case <-ctx.Done():
			cause := ctx.Err()
			if f := mp.lb.Failing(); f != nil {
				cause = f
			}
			return workspace.StoreError(mp.store, "flush the fuse mount", fmt.Errorf("%d files not uploaded: %w", pending, cause))
		case <-mp.exited:
		case <-time.After(wait):
		}
		wait = min(2*wait, 200*time.Millisecond)
	}
}

// Unmount implements workspace.MountPoint.
func (mp *mountPoint) Unmount(ctx context.Context) error {
	mp.unmountOnce.Do(func() {
		ferr := mp.Flush(ctx)
		mp.stop(ctx)
		if ferr == nil {
			_ = os.RemoveAll(mp.cache)
		}
		mp.unmountErr = ferr
	})
	return mp.unmountErr
}

// stop unmounts (lazily if the mount is busy) and waits for rclone.
func (mp *mountPoint) stop(ctx context.Context) {
	if out, err := exec.CommandContext(ctx, mp.m.cfg.Fusermount, "-u", mp.dir).CombinedOutput(); err != nil && mounted(mp.dir) {
		mp.m.cfg.Log.Warn("unmount busy; detaching it", "dir", mp.dir, logkey.Error, strings.TrimSpace(string(out)))
		_ = exec.Command(mp.m.cfg.Fusermount, "-uz", mp.dir).Run()
	}
	select {
	case <-mp.exited:
	case <-time.After(10 * time.Second):
		_ = syscall.Kill(-mp.cmd.Process.Pid, syscall.SIGKILL)
		<-mp.exited
	}
	_ = mp.lb.Close()
	if mounted(mp.dir) || stale(mp.dir) {
		_ = exec.Command(mp.m.cfg.Fusermount, "-uz", mp.dir).Run()
	}
}

// mounted reports whether dir is the mount point of an rclone mount.
func mounted(dir string) bool {
	for _, mnt := range mounts() {
		if mnt.dir == filepath.Clean(dir) && mnt.fstype == "fuse.rclone" {
			return true
		}
	}
	return false
}

type mountEntry struct{ dir, fstype string }

func mounts() []mountEntry {
	b, err := os.ReadFile("/proc/self/mountinfo")
	if err != nil {
		return nil
	}
	var out []mountEntry
	for _, line := range strings.Split(string(b), "\n") {
		pre, post, ok := strings.Cut(line, " - ")
		f, g := strings.Fields(pre), strings.Fields(post)
		if !ok || len(f) < 5 || len(g) < 1 {
			continue
		}
		out = append(out, mountEntry{dir: unescape(f[4]), fstype: g[0]})
	}
	return out
}

// unescape undoes mountinfo's octal escapes (\040 for a space).
func unescape(s string) string {
	if !strings.Contains(s, `\`) {
		return s
	}
	var b strings.Builder
	for i := 0; i < len(s); i++ {
		if s[i] == '\\' && i+3 < len(s) {
			if n, err := strconv.ParseUint(s[i+1:i+4], 8, 8); err == nil {
				b.WriteByte(byte(n))
				i += 3
				continue
			}
		}
		b.WriteByte(s[i])
	}
	return b.String()
}

// Sweep detaches rclone mounts under root that a runner killed before it
// could unmount left behind (their rclone gone or orphaned); call it at
// boot, before any mount of this runner exists.
func Sweep(cfg Config, root string) []string {
	root = filepath.Clean(root)
	var swept []string
	for _, mnt := range mounts() {
		if mnt.fstype != "fuse.rclone" || mnt.dir != root && !strings.HasPrefix(mnt.dir, root+"/") {
			continue
		}
		if err := exec.Command(cfg.Fusermount, "-uz", mnt.dir).Run(); err == nil {
			swept = append(swept, mnt.dir)
		}
	}
	return swept
}

// logTail is the last few KiB of rclone's output, for errors.
func logTail(path string) string {
	f, err := os.Open(path)
	if err != nil {
		return ""
	}
	defer f.Close()
	const tailMax = 4 << 10
	if st, err := f.Stat(); err == nil && st.Size() > tailMax {
		_, _ = f.Seek(st.Size()-tailMax, io.SeekStart)
	}
	b, _ := io.ReadAll(io.LimitReader(f, 4<<10))
	return string(bytes.TrimSpace(b))
}
