package kubernetes

import (
	"context"
	"fmt"
	"log/slog"
	"net/http"
	"sync"
	"sync/atomic"
	"time"

	"k8s.io/apimachinery/pkg/types"

	"github.com/agentrunner/runner/internal/sandbox"
	"github.com/agentrunner/runner/internal/sandboxd/client"
)

// Sandbox is a running pod with its daemon, which serves its processes,
// files, channels and trees (client.Remote).
type Sandbox struct {
	client.Remote
	p    *Provider
	id   string
	uid  types.UID // of the pod: a resumed sandbox's pod has the same name
	fw   *forwarder
	http *http.Client
	log  *slog.Logger
	// parked says the provider parks: asSandbox wraps it in Parkable.
	parked bool

	// lost is why the provider's pod watch saw the pod go (nil: it did
	// not); its own lock, as Destroy holds mu through API calls.
	lost atomic.Pointer[error]

	// mu guards gone and removed.
	mu      sync.Mutex
	gone    bool // destroyed or parked: its pod is no longer this value's
	removed bool // destroyed: the policy (and claim) deleted too
}

// markLost records that the pod is gone (the pod watch saw it deleted or
// ended) and ends the port-forward: every stream through it fails now,
// and no new one is dialled, so neither a process nor a warm session's
// next turn runs in a container the kubelet is about to kill.
func (s *Sandbox) markLost(err error) {
	s.lost.CompareAndSwap(nil, &err)
	s.fw.fail(err)
	s.http.CloseIdleConnections()
}

var (
	_ sandbox.Sandbox     = (*Sandbox)(nil)
	_ sandbox.Channeler   = (*Sandbox)(nil)
	_ sandbox.Prober      = (*Sandbox)(nil)
	_ sandbox.FileTree    = (*Sandbox)(nil)
	_ sandbox.TreeWatcher = (*Sandbox)(nil)
)

// Probe checks that the pod still exists and its daemon answers. The API
// server is asked first: a pod deleted out of band keeps answering through
// the open port-forward until the kubelet has killed its container, and
// reusing it then would lose the turn.
func (s *Sandbox) Probe(ctx context.Context) error {
	if s.destroyed() {
		return goneErr(s.id, "was destroyed")
	}
	if err := s.lost.Load(); err != nil {
		return *err
	}
	if err := s.p.gone(s.id)(ctx); err != nil {
		return err
	}
	if _, err := s.Daemon.Health(ctx); err != nil {
		if gerr := s.p.gone(s.id)(ctx); gerr != nil {
			return gerr
		}
		return fmt.Errorf("kubernetes sandbox %s: %w", s.id, err)
	}
	return nil
}

func (s *Sandbox) destroyed() bool {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.gone
}

// Destroy deletes the pod, its policy and its claim. It is idempotent; a
// pod already gone counts as destroyed, and a parked sandbox's Destroy
// deletes the claim and policy its Pause kept.
func (s *Sandbox) Destroy(ctx context.Context) error {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.removed {
		return nil
	}
	s.p.pods.remove(s.uid, s) // its own deletion is no loss to report
	ctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), time.Minute)
	defer cancel()
	if err := s.p.remove(ctx, s.id); err != nil {
		return fmt.Errorf("kubernetes sandbox %s: %w", s.id, err)
	}
	s.gone, s.removed = true, true
	s.http.CloseIdleConnections()
	s.fw.Close()
	s.log.Info("sandbox destroyed")
	return nil
}
