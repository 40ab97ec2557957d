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
//	  │                ├─ prewarmed ─────────┤  a new session claims a slot
//	  │                │   (bind fails: cold)│  started before it (prewarm.go)
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
// Each state has its file: admit (admit.go, modelenv.go) checks the
// request and run.go and claim.go claim the session; begin.go records the
// turn and opens its event log (internal/eventlog); acquire (turn.go)
// takes a warm harness (warm.go), claims a pre-warmed slot for a new
// session and binds it to the turn (prewarm.go), or sets a cold one up
// (stages.go) and names how with the type acquired (state.go), whose
// String is the agent-session event's mode on the wire; prompt drives the harness
// (turn.go, approval.go, clienttools.go); settle (settle.go) commits the
// outcome with the last events, then keeps the harness in the pool or
// releases it. fallback.go moves a turn whose sandbox vanished; decide.go
// resumes a turn paused on an approval; stop.go and drain.go end turns
// from outside.
//
// Concurrency: Service is safe for concurrent use; each Run owns its turn
// and waits for everything it started before returning.
package runner
