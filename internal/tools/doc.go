// Package tools serves one turn's custom tools to the harness as an MCP
// server (the official go-sdk) and executes each call runner-side: a POST
// to the turn's toolCallback endpoint (reference 9.2). Every failure of a
// call (timeout, HTTP error, bad body, blocked destination) becomes a tool
// error result the model can read; none ends the session.
//
// The callback endpoint passes an SSRF guard at New and again at dial
// time, so DNS rebinding cannot reach a private address. A Set is safe for
// concurrent use by any number of MCP sessions; package tools/relay
// carries those sessions from inside the sandbox. Permission decisions
// are not taken here: Config.Check lets the runner veto a call.
package tools
