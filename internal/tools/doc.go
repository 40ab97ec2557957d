// Package tools serves one turn's custom tools to the harness as an MCP
// server (the official go-sdk) and executes each call runner-side: a POST
// to the turn's toolCallback endpoint (docs/contract.md, Tools). Every failure of a
// call (timeout, HTTP error, bad body, unreachable callback) becomes a tool
// error result the model can read; none ends the session.
//
// The callback endpoint is the platform's own API and trusted: no address
// guard, resolved at call time; direct call descriptors still cannot leave
// its origin. User MCP servers, which the harness dials, pass
// CheckMCPServer at admission instead. A Set is safe for
// concurrent use by any number of MCP sessions; package tools/relay
// carries those sessions from inside the sandbox. Permission decisions
// are not taken here: Config.Check lets the runner veto a call.
package tools
