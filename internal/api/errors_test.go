package api

import (
	"errors"
	"fmt"
	"net/http"
	"testing"

	"github.com/agentrunner/runner/internal/errdefs"
	"github.com/agentrunner/runner/internal/store"
)

// TestFencedStatus: a turn refused because another replica took its
// session over is 503 (its new owner serves a retry), not 409: no
// conflict reaches a caller while a replica can serve the session.
func TestFencedStatus(t *testing.T) {
	fenced := fmt.Errorf("record the turn: %w", &store.FencedError{SessionID: "s", Generation: 1, Holder: store.Lease{Owner: "b", Generation: 2}})
	for _, err := range []error{fenced, errdefs.With(errdefs.ErrFenced, errors.New("taken over"))} {
		if got := statusOf(err); got != http.StatusServiceUnavailable {
			t.Errorf("statusOf(%v) = %d, want %d", err, got, http.StatusServiceUnavailable)
		}
	}
}
