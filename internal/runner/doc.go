// Package runner runs one agent turn end to end: admit the request, acquire
// a sandbox, open the harness session, drive the prompt, stream events and
// tear down what the turn used. It depends only on the family interfaces
// (sandbox, agent); cmd/runner wires the implementations.
//
// Glossary: a sandbox is created, paused (parked, resumable) or destroyed.
// A harness session is opened (new or loaded) and closed. A conversation
// (sessionId) has turns; a turn has events.
//
// A turn's states:
//
//	admit ──► acquire ─┬─ warm ─┬────────────┐  the pool's harness
//	  │                │        └─ resume ───┤  parked on a person's approval
//	  │                └─ cold ─┬─ new ──────┤  set up in stages (stages.go),
//	  │                         ├─ load ─────┤  unwound in reverse
//	  │                         └─ replay ───┤
//	  ▼                                      ▼
//	refused                               prompt ──► sandbox lost before the
//	                                         │       first event: fallback,
//	                                         │       acquire again cold (once)
//	                                         ▼
//	                                      settle ─┬─ keep: parked warm, or
//	                                              │  paused on a gate
//	                                              └─ release: stages undone
//
// admit (admit.go) checks the request and claims the session; acquire
// (turn.go, stages.go) names how the turn got its harness with the type
// acquired (state.go), whose String is the agent-session event's mode on
// the wire; prompt drives the harness (prompt.go, approval.go); settle
// (turn.go) commits the outcome with the last events (internal/eventlog)
// and keeps the harness in the pool or releases it.
//
// Concurrency: Service is safe for concurrent use; each Run owns its turn
// and waits for everything it started before returning.
package runner
