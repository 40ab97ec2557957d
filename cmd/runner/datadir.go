package main

import (
	"crypto/rand"
	"encoding/hex"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"strconv"
	"strings"

	"github.com/agentrunner/runner/internal/config"
	"golang.org/x/sys/unix"
)

// A data dir is shared by one `runner serve` and any number of in-process
// `runner run`s (they read and continue the service's sessions from the
// ledger). What must stay exclusive is held with flock, which the kernel
// drops when a process dies however it dies:
//   - serve.lock: one service per data dir. A second one would share the
//     first's replica id, so its start-up recovery would mark the first's
//     running turns interrupted and reap its sandboxes.
//   - run/tools-<id>.sock: every process serves its own tool relay socket
//     beside a lock of the same name; a start-up sweep removes only the
//     sockets whose lock is free (their process is gone), never one another
//     process is serving.

// lockServe takes the data dir's service lock for this process's life, or
// says which process holds it. sqlite is set when the store is the data
// dir's SQLite file: it holds one replica's sessions, so replicas of one
// service must share PostgreSQL instead, and the refusal says so.
func lockServe(dataDir string, sqlite bool) (*os.File, error) {
	path := filepath.Join(dataDir, "serve.lock")
	f, err := os.OpenFile(path, os.O_RDWR|os.O_CREATE, 0o600)
	if err != nil {
		return nil, fmt.Errorf("service lock %s: %w", path, err)
	}
	if err := unix.Flock(int(f.Fd()), unix.LOCK_EX|unix.LOCK_NB); err != nil {
		b := make([]byte, 32)
		n, _ := f.ReadAt(b, 0)
		f.Close()
		if errors.Is(err, unix.EWOULDBLOCK) {
			holder := strings.TrimSpace(string(b[:n]))
			if holder == "" {
				holder = "unknown"
			}
			fix := "stop it, or give this one its own AGENTA_RUNNER_DATA_DIR"
			if sqlite {
				fix += "; the data dir's SQLite store serves one replica: for several replicas of one service, share a PostgreSQL store (AGENTA_RUNNER_DATABASE_URL), each replica with its own data dir"
			}
			return nil, fmt.Errorf("data dir %s is in use by another runner serve (pid %s): two services on one data dir would take each other's sessions; %s", dataDir, holder, fix)
		}
		return nil, fmt.Errorf("service lock %s: %w", path, err)
	}
	// The holder's pid, for the message above; the lock is what counts.
	if err := f.Truncate(0); err == nil {
		_, _ = f.WriteAt([]byte(strconv.Itoa(os.Getpid())+"\n"), 0)
	}
	return f, nil
}

// toolSocket is a tool relay socket path of this process's own, with the
// lock that marks it live (held until release).
type toolSocket struct {
	Path string
	lock *os.File
}

// release removes the socket and its lock.
func (s *toolSocket) release() {
	_ = os.Remove(s.Path)
	_ = os.Remove(lockOf(s.Path))
	_ = s.lock.Close()
}

func lockOf(sock string) string { return strings.TrimSuffix(sock, ".sock") + ".lock" }

// newToolSocket picks this process's tool relay socket in dir
// (config.ToolsSocketDir) and sweeps the sockets of processes that are
// gone.
func newToolSocket(dir string) (*toolSocket, error) {
	var b [4]byte
	_, _ = rand.Read(b[:])
	id := hex.EncodeToString(b[:])
	if err := os.MkdirAll(dir, 0o755); err != nil {
		return nil, fmt.Errorf("tool relay socket dir: %w", err)
	}
	sweepToolSockets(dir)
	// Locked before it gets the name the sweep looks for, so no sweep
	// ever finds it unlocked.
	tmp := filepath.Join(dir, ".tools-"+id+".tmp")
	f, err := os.OpenFile(tmp, os.O_RDWR|os.O_CREATE|os.O_EXCL, 0o600)
	if err != nil {
		return nil, fmt.Errorf("tool relay socket lock: %w", err)
	}
	if err := unix.Flock(int(f.Fd()), unix.LOCK_EX|unix.LOCK_NB); err != nil {
		f.Close()
		_ = os.Remove(tmp)
		return nil, fmt.Errorf("tool relay socket lock: %w", err)
	}
	sock := filepath.Join(dir, "tools-"+id+".sock")
	if err := os.Rename(tmp, lockOf(sock)); err != nil {
		f.Close()
		_ = os.Remove(tmp)
		return nil, fmt.Errorf("tool relay socket lock: %w", err)
	}
	return &toolSocket{Path: sock, lock: f}, nil
}

// sweepToolSockets removes the sockets in dir whose process is gone: their
// lock is free. The socket of an earlier version (tools.sock, no lock) is
// left alone: a service of that version may still be serving it.
func sweepToolSockets(dir string) {
	locks, _ := filepath.Glob(filepath.Join(dir, "tools-*.lock"))
	for _, l := range locks {
		f, err := os.OpenFile(l, os.O_RDWR, 0)
		if err != nil {
			continue
		}
		if unix.Flock(int(f.Fd()), unix.LOCK_EX|unix.LOCK_NB) == nil {
			_ = os.Remove(strings.TrimSuffix(l, ".lock") + ".sock")
			_ = os.Remove(l)
		}
		f.Close()
	}
}

// cliReplicaID is the replica id of an in-process `runner run`: its own,
// derived from the data dir's, so that a session the service holds is
// refused by its lease instead of being run by both, and the service's
// start-up recovery leaves this process's turn alone.
func cliReplicaID(cfg config.Config) (string, error) {
	if err := os.MkdirAll(cfg.DataDir, 0o700); err != nil {
		return "", fmt.Errorf("data dir %s: %w (set AGENTA_RUNNER_DATA_DIR to a writable directory)", cfg.DataDir, err)
	}
	base, err := replicaID(cfg)
	if err != nil {
		return "", err
	}
	var b [4]byte
	_, _ = rand.Read(b[:])
	return base + "-cli-" + hex.EncodeToString(b[:]), nil
}
