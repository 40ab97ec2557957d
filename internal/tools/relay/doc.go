// Package relay carries the runner's tool server into a sandbox. Inside,
// the harness runs `runner mcp-stdio` (MCPStdio) as a stdio MCP server;
// it connects to a unix socket bind-mounted from the runner, proves
// itself with a token, and then copies bytes both ways. Outside, a Relay
// accepts those connections and serves each one an MCP session of the
// Binding its token names.
//
// One Relay (and socket) serves the whole runner. A Binding belongs to
// one harness session: its token goes into that session's MCP server
// entry, and Use swaps in each turn's tools.Set, so a warm session's
// long-lived mcp-stdio process always calls the current turn's tools and
// nobody else's. Tokens are compared in constant time; a wrong one gets
// "ERR" and a closed connection. The wire after the hello line is plain
// newline-delimited JSON-RPC, so ServeConn and Client work over any
// byte stream (the remote provider's daemon connection, later).
package relay
