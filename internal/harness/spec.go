package harness

import "github.com/agentrunner/runner/internal/agent"

// Spec returns the launch-table entry for a harness name with the
// per-harness quirks the runner knows: which instructions file it reads,
// where it keeps its transcripts and how it names them, how it resumes,
// what it cannot do (docs/protocols.md, ACP; docs/harnesses.md). Unknown
// names get a plain ACP entry.
func Spec(name string, command []string) agent.Spec {
	s := agent.Spec{Name: name, Command: command, Instructions: "AGENTS.md"}
	switch name {
	case "claude":
		s.Instructions = "CLAUDE.md"
		s.StateDirs = []string{".claude/projects"}
		s.KeyedDirs = []agent.KeyedDir{{Dir: ".claude/projects", Key: ClaudeProjectKey}}
		// claude-agent-acp resumes a session only through the SDK option.
		s.LoadMeta = func(id string) map[string]any {
			return map[string]any{"claudeCode": map[string]any{"options": map[string]any{"resume": id}}}
		}
	case "codex":
		s.StateDirs = []string{".codex"} // minus its SQLite and auth.json
	case "opencode":
		s.StateDirs = []string{".local/share/opencode"}
	case "pi_core", "pi_agenta":
		s.StateDirs = []string{".pi/agent/sessions"}
		s.KeyedDirs = []agent.KeyedDir{{Dir: ".pi/agent/sessions", Key: PiSessionKey, FirstLine: PiSessionHeader, Drop: []string{".pi/pi-acp/session-map.json"}}}
		s.NoMCP = true         // pi-acp does not forward ACP mcpServers
		s.NoPermissions = true // pi runs its tools without session/request_permission
	case "gemini":
		s.UnreliableLoad = true // gemini-cli 0.61 session/load loses history
		// Its tmp/<key> is a hash of the project root; it is never loaded
		// natively (UnreliableLoad), so nothing is moved.
		s.StateDirs = []string{".gemini/tmp"}
	}
	return s
}
