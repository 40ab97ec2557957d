package runner

import "github.com/agentrunner/runner/internal/wire"

// acquired is how a turn got its harness: the acquire state of the
// turn's diagram (doc.go). Its String is the agent-session event's mode
// on the wire, mapped here and nowhere else.
type acquired int

const (
	// acquiredNew is a cold harness with a new session, the tail alone
	// its prompt.
	acquiredNew acquired = iota
	// acquiredWarm is the session's harness, kept warm in the pool.
	acquiredWarm
	// acquiredLoad is a cold harness that reloaded its own transcript.
	acquiredLoad
	// acquiredReplay is a cold harness given the conversation as text.
	acquiredReplay
	// acquiredResume is a warm harness parked on a person's approval,
	// resumed with the answer.
	acquiredResume
)

func (a acquired) String() string {
	switch a {
	case acquiredWarm:
		return "warm"
	case acquiredLoad:
		return "load"
	case acquiredReplay:
		return "replay"
	case acquiredResume:
		return "resume"
	}
	return "new"
}

// agentSessionEvent tells the caller how the turn got the harness lv.
func agentSessionEvent(how acquired, lv *live) wire.Event {
	return wire.DataEvent("agent-session", map[string]string{"mode": how.String(), "agentSessionId": lv.sess.ID(), "sandbox": lv.sb.Info().ID}, false)
}
