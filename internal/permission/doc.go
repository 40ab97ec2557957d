// Package permission decides whether a tool call may run: allow, ask a
// person, or deny (docs/contract.md, Permissions). A Plan is built once per turn from
// the request's permissions, tool specs and user MCP servers, and is
// immutable, so Decide is safe for concurrent use. Decisions holds the
// approvals a person already gave, parsed from the request's messages; it
// is consumed once per decision and is safe for concurrent use.
//
// The package only decides. Emitting interaction_request events, parking
// the turn and answering the harness belong to the runner.
package permission
