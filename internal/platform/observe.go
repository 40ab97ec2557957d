package platform

import (
	"context"
	"errors"

	"github.com/agentrunner/runner/internal/wire"
)

// Observer is told of every session turn as it runs: the platform
// mirror and the trace exporter are observers. Begin and the returned
// TurnObserver's methods run on the turn's path: they must only hand the
// work off (queue it) and return.
type Observer interface {
	// Begin is called once the turn is in the ledger (a turn without a
	// session: as it starts, with SessionID "" and TurnIndex -1); nil
	// means the observer has nothing to do for this turn.
	Begin(ctx context.Context, b TurnBegin) TurnObserver
}

// TurnBegin describes a starting turn to its observers.
type TurnBegin struct {
	Request   *wire.Request
	SessionID string
	TurnID    string
	TurnIndex int
	Harness   string
	Provider  string
	// Fresh is set when the tail is a new user message (not an approval
	// envelope): its text and attachments are the user's record.
	Fresh       bool
	UserText    string
	Attachments []wire.ContentBlock
	// Stop cancels the running turn (a Stop pressed on the platform).
	Stop func(cause error)
	// Spare are the interaction ids of the session's parked approvals
	// when this turn answers at least one of them: the platform must not
	// cancel them as stale (the resume settles them).
	Spare []string
	// LearnProject records the project the platform says the session
	// belongs to, so /kill finds a turn whose request named none.
	LearnProject func(projectID string)
	// OwnerClaimed is set when the turn already claimed the session on
	// the platform before it started (OwnerClaimer).
	OwnerClaimed bool
}

// TurnObserver follows one turn.
type TurnObserver interface {
	// Event is each event of the turn, in order, as the caller sees it.
	Event(ev wire.Event)
	// End is the turn's outcome, before its result is returned.
	End(e TurnEnd)
}

// TurnEnd is how a turn ended.
type TurnEnd struct {
	StopReason     string
	Usage          *wire.Usage
	Err            error
	AgentSessionID string
	SandboxID      string
	Model          string
}

// TraceIdentifier is a TurnObserver that traces the turn: its trace id
// goes into the result.
type TraceIdentifier interface {
	TraceID() string
}

// AttachmentFetcher is a TurnObserver that can fetch the turn's
// attachments from the platform.
type AttachmentFetcher interface {
	FetchAttachment(ctx context.Context, id string) (Attachment, error)
}

// OwnerClaimer is an Observer that can claim a session for this replica
// on the platform the request came from (Agenta's owner key), as the
// reference runner does before it starts a local sandbox.
type OwnerClaimer interface {
	// ClaimOwner claims the session and returns the replica that owns it
	// after the claim; "" when unknown (the request is not the
	// platform's, or the platform failed or did not answer before ctx
	// ended: the claimer warns and counts, the turn goes on).
	ClaimOwner(ctx context.Context, req *wire.Request) (owner string)
}

// ErrStopped is the cause observers pass to TurnBegin.Stop: a turn
// stopped from the platform ends as an ordinary cancellation (stopReason
// cancelled), not a failure.
var ErrStopped = errors.New("turn stopped from the platform")
