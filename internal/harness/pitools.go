package harness

import (
	"encoding/json"
	"path"
	"slices"
	"strings"

	"github.com/agentrunner/runner/internal/errdefs"
)

// piBuiltinTools are the tools Pi's --tools flag knows.
var piBuiltinTools = []string{"read", "bash", "edit", "write", "grep", "find", "ls"}

// piToolsFile is where, under the session's home, the launcher that
// starts pi with the request's built-in tools is written.
const piToolsFile = ".pi/agent/pi-with-tools"

// piTools honours a Pi request's `tools` list (Pi's built-in tools, as
// Agenta's SDK sends them): pi-acp starts $PI_ACP_PI_COMMAND, so that
// becomes a launcher running the installed pi with --tools (--no-tools
// for an empty list). Absent or null keeps Pi's defaults. It returns the
// launcher file and its path in the sandbox, or ok=false.
func piTools(raw json.RawMessage, pi, home string) (LaunchFile, string, bool, error) {
	if len(raw) == 0 || string(raw) == "null" || pi == "" {
		return LaunchFile{}, "", false, nil
	}
	var names []string
	if err := json.Unmarshal(raw, &names); err != nil {
		return LaunchFile{}, "", false, errdefs.Invalidf("tools: want a list of Pi built-in tool names (%s)", strings.Join(piBuiltinTools, ", "))
	}
	for i, n := range names {
		if !slices.Contains(piBuiltinTools, n) {
			return LaunchFile{}, "", false, errdefs.Invalidf("tools[%d]: %q is not a Pi built-in tool (%s); send runner-served tools as customTools", i, n, strings.Join(piBuiltinTools, ", "))
		}
	}
	flag := "--no-tools"
	if len(names) > 0 {
		flag = "--tools " + strings.Join(names, ",")
	}
	script := "#!/bin/sh\nexec " + shellQuote(pi) + " " + flag + " \"$@\"\n"
	return LaunchFile{Content: []byte(script), Mode: 0o755}, path.Join(home, piToolsFile), true, nil
}

func shellQuote(s string) string { return "'" + strings.ReplaceAll(s, "'", `'\''`) + "'" }
