package workspace

import (
	"context"
	"strings"
)

// The optional FUSE mode (AGENTA_RUNNER_WORKSPACE_MODE=fuse): the working
// directory is not restored and checkpointed but mounted from the store
// (rclone mount), for workspaces too large to restore. The FUSE server
// never holds the store's lease: it talks S3 to a loopback endpoint with
// keys of its own, and the endpoint re-signs each request with the lease
// in use (internal/workspace/resign), so a lease that is re-signed
// mid-turn never leaves the mount with expired keys.

// Mounter mounts a store's objects at a directory on the runner's host.
type Mounter interface {
	Mount(ctx context.Context, s Store, dir string) (MountPoint, error)
}

// MountPoint is one mounted store.
type MountPoint interface {
	// Flush returns once everything written through the mount so far is
	// in the store; an error names the store and why it is not.
	Flush(ctx context.Context) error
	// Err is non-nil once the mount stopped working: its FUSE server
	// exited, or the store has been refusing or failing its requests.
	Err() error
	// Unmount flushes, then unmounts and stops the FUSE server; it is
	// idempotent.
	Unmount(ctx context.Context) error
	// SetStore makes later requests sign with s's leases (a warm turn's
	// own credential); s must name the same objects.
	SetStore(s Store) error
}

// Leased is a store whose requests are signed with leases (S3), so that a
// mount can reach its objects by S3 too.
type Leased interface {
	Leases() Leaser
}

// LeasedPrefix returns the leases s signs with and the key prefix of s
// under the lease's own prefix ("" for its root); ok is false for a store
// that is not reached by S3 (a directory).
func LeasedPrefix(s Store) (l Leaser, prefix string, ok bool) {
	var parts []string
	for {
		switch v := s.(type) {
		case *prefixed:
			parts = append([]string{strings.TrimSuffix(v.prefix, "/")}, parts...)
			s = v.s
			continue
		case Leased:
			return v.Leases(), strings.Join(parts, "/"), true
		}
		return nil, "", false
	}
}

// S3Remote is how a FUSE server reaches a store: a loopback endpoint and
// keys of its own, never the store's lease.
type S3Remote struct {
	URL       string // http://127.0.0.1:port
	Region    string
	AccessKey string
	SecretKey string
	Path      string // bucket/prefix
}

// Loopback is a running loopback S3 endpoint in front of one store.
type Loopback interface {
	Remote() S3Remote
	// Err is non-nil once the store has kept failing the endpoint's
	// requests, or its lease no longer names the mounted objects.
	Err() error
	// Failing is the store's last failure while it is failing at all.
	Failing() error
	// SetLeases signs later requests with l (prefix: the mount's key
	// prefix under l's own).
	SetLeases(l Leaser, prefix string)
	Close() error
}
