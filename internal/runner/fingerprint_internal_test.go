package runner

import (
	"testing"

	"github.com/agentrunner/runner/internal/wire"
)

func textMsg(role, text string) wire.Message {
	return wire.Message{Role: role, Content: wire.MessageContent{Text: text, IsText: true}}
}

// TestHistoryFingerprint: the user side decides, with part boundaries
// kept (the parts are streamed into the hash, not joined).
func TestHistoryFingerprint(t *testing.T) {
	base := historyFingerprint([]wire.Message{textMsg("user", "ab"), textMsg("assistant", "x"), textMsg("user", "c")})
	same := historyFingerprint([]wire.Message{textMsg("user", "ab"), textMsg("assistant", "rendered otherwise"), textMsg("user", "c")})
	if base != same {
		t.Error("assistant text changed the fingerprint")
	}
	call := func(id string) wire.Message {
		return wire.Message{Role: "assistant", Content: wire.MessageContent{Blocks: []wire.ContentBlock{{Type: "tool_call", ToolCallID: id}}}}
	}
	for name, msgs := range map[string][]wire.Message{
		"boundary moved": {textMsg("user", "a"), textMsg("assistant", "x"), textMsg("user", "bc")},
		"one prompt":     {textMsg("user", "abc")},
		"reordered":      {textMsg("user", "c"), textMsg("assistant", "x"), textMsg("user", "ab")},
		"with a call":    {textMsg("user", "ab"), call("k1"), textMsg("user", "c")},
	} {
		if historyFingerprint(msgs) == base {
			t.Errorf("%s: same fingerprint", name)
		}
	}
	if historyFingerprint([]wire.Message{call("a"), call("b")}) == historyFingerprint([]wire.Message{call("b"), call("a")}) {
		t.Error("tool-call order ignored")
	}
}

// TestConfigFingerprintIgnoresPermissions: the runner answers every
// permission request with the turn's own policy, so a turn with another
// policy (runner run without -ask after one with it) continues the live
// harness; a change the harness is configured with does not.
func TestConfigFingerprintIgnoresPermissions(t *testing.T) {
	base := &wire.Request{Harness: "claude", Model: "m", Permissions: &wire.Permissions{Default: "ask"}}
	other := *base
	other.Permissions = &wire.Permissions{Default: "allow_reads"}
	if configFingerprint(base, "local") != configFingerprint(&other, "local") {
		t.Error("a permission policy change changed the config fingerprint")
	}
	other.Model = "m2"
	if configFingerprint(base, "local") == configFingerprint(&other, "local") {
		t.Error("a model change kept the config fingerprint")
	}
}
