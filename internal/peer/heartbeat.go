package peer

import (
	"context"
	"log/slog"
	"sync"
	"time"

	"github.com/agentrunner/runner/internal/logkey"
	"github.com/agentrunner/runner/internal/store"
)

// Rows is what a replica writes of its own row in the registry.
type Rows interface {
	PutReplica(ctx context.Context, r store.Replica) (store.Replica, error)
	DeleteReplica(ctx context.Context, id string) error
}

// Heartbeat keeps this replica's row in the registry: its advertised URL,
// written every interval with the time, and whether it drains. The other
// replicas read it to forward to this one and to tell it is alive.
type Heartbeat struct {
	rows  Rows
	every time.Duration
	log   *slog.Logger
	now   func() time.Time

	stop chan struct{}
	wg   sync.WaitGroup

	// mu guards the following.
	mu      sync.Mutex
	row     store.Replica
	started bool
	stopped bool
}

// NewHeartbeat returns the heartbeat of replica id, reached at url.
func NewHeartbeat(rows Rows, id, url string, every time.Duration, log *slog.Logger) *Heartbeat {
	if log == nil {
		log = slog.New(slog.DiscardHandler)
	}
	return &Heartbeat{rows: rows, every: every, log: log, now: time.Now, stop: make(chan struct{}),
		row: store.Replica{ID: id, AdvertiseURL: url}}
}

// Start writes the row once, so that a store that refuses it fails the
// boot, then keeps writing it every interval until Stop.
func (h *Heartbeat) Start(ctx context.Context) error {
	h.mu.Lock()
	h.row.StartedAt = h.now()
	h.started = true
	h.mu.Unlock()
	if err := h.beat(ctx); err != nil {
		return err
	}
	h.wg.Go(h.loop)
	return nil
}

func (h *Heartbeat) loop() {
	t := time.NewTicker(h.every)
	defer t.Stop()
	for {
		select {
		case <-h.stop:
			return
		case <-t.C:
			ctx, cancel := context.WithTimeout(context.Background(), h.every)
			if err := h.beat(ctx); err != nil {
				// The next beat may pass; the other replicas treat a row
				// that stays silent as a replica that may be gone.
				h.log.Warn("replica heartbeat", logkey.Error, err)
			}
			cancel()
		}
	}
}

func (h *Heartbeat) beat(ctx context.Context) error {
	h.mu.Lock()
	if h.stopped {
		h.mu.Unlock()
		return nil
	}
	row := h.row
	h.mu.Unlock()
	row.HeartbeatAt = h.now()
	_, err := h.rows.PutReplica(ctx, row)
	return err
}

// Drain marks the row draining, at once: a replica that forwards a
// request here learns it should take the session over.
func (h *Heartbeat) Drain(ctx context.Context) error {
	h.mu.Lock()
	h.row.Draining = true
	h.mu.Unlock()
	return h.beat(ctx)
}

// Stop ends the beats and removes the row (a clean stop: the others need
// not wait for it to go stale). It is idempotent.
func (h *Heartbeat) Stop(ctx context.Context) error {
	h.mu.Lock()
	if h.stopped {
		h.mu.Unlock()
		return nil
	}
	h.stopped = true
	started := h.started
	h.mu.Unlock()
	if !started {
		return nil
	}
	close(h.stop)
	h.wg.Wait()
	return h.rows.DeleteReplica(ctx, h.row.ID)
}
