// Package runner runs one agent turn end to end: admit the request, acquire
// a sandbox, open the harness session, drive the prompt, stream events and
// tear down what the turn used. It depends only on the family interfaces
// (sandbox, agent); cmd/runner wires the implementations.
//
// Glossary: a sandbox is created, paused (parked, resumable) or destroyed.
// A harness session is opened (new or loaded) and closed. A conversation
// (sessionId) has turns; a turn has events.
//
// Concurrency: Service is safe for concurrent use; each Run owns its turn
// and waits for everything it started before returning.
package runner
