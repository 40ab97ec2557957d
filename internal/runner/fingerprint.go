package runner

import (
	"bufio"
	"crypto/sha256"
	"encoding/binary"
	"encoding/hex"
	"encoding/json"
	"maps"
	"slices"
	"sort"
	"strconv"

	"github.com/agentrunner/runner/internal/wire"
)

// configFingerprint hashes what the harness was configured with (docs/contract.md,
// Sessions): the request minus the conversation, per-turn ids, tracing,
// credential values, the callback bearer and the permission policy, which
// change without making a live harness wrong.
func configFingerprint(r *wire.Request, provider string) string {
	c := *r
	c.Sandbox = provider
	c.Messages = nil
	c.TurnID, c.StreamID, c.SessionID = "", "", ""
	c.Context, c.Telemetry, c.EffectiveParams, c.Tools = nil, nil, nil, nil
	c.RunContext = nil
	// The runner decides every permission request itself, with the turn's
	// own policy: a live harness is not configured with it, so a turn
	// with another policy (a terminal's -ask, say) continues it.
	c.Permissions = nil
	if c.ToolCallback != nil {
		cb := *c.ToolCallback
		cb.Authorization = ""
		c.ToolCallback = &cb
	}
	if c.ModelConnection != nil {
		mc := *c.ModelConnection
		mc.Credentials = stripValues(mc.Credentials)
		c.ModelConnection = &mc
	}
	servers := make([]wire.MCPServer, len(c.MCPServers))
	for i, s := range c.MCPServers {
		s.Connection.Credentials = stripValues(s.Connection.Credentials)
		servers[i] = s
	}
	c.MCPServers = servers
	return hash(c)
}

func stripValues(cs []wire.Credential) []wire.Credential {
	out := make([]wire.Credential, len(cs))
	for i, c := range cs {
		c.Value = ""
		out[i] = c
	}
	return out
}

// historyFingerprint hashes the user side of a conversation: user texts,
// tool-call ids in first-seen order, and the number of user prompts.
// Assistant text is ignored: callers may render it differently. Each part
// is streamed into the hash with its length, so the growing history is
// never copied into one buffer.
func historyFingerprint(msgs []wire.Message) string {
	h := sha256.New()
	// Parts are small and many: buffered, the hash sees blocks, not two
	// calls per message.
	w := bufio.NewWriterSize(h, 4096)
	part := func(kind byte, s string) {
		var n [9]byte
		n[0] = kind
		binary.BigEndian.PutUint64(n[1:], uint64(len(s)))
		w.Write(n[:])
		w.WriteString(s)
	}
	prompts := 0
	var seen map[string]bool
	for _, m := range msgs {
		if m.Role == "user" {
			if t := messageText(m); t != "" {
				part('t', t)
				prompts++
			}
		}
		for _, b := range m.Content.Blocks {
			if (b.Type == "tool_call" || b.Type == "tool_result") && b.ToolCallID != "" && !seen[b.ToolCallID] {
				if seen == nil {
					seen = map[string]bool{}
				}
				seen[b.ToolCallID] = true
				part('c', b.ToolCallID)
			}
		}
	}
	part('n', strconv.Itoa(prompts))
	w.Flush()
	return hex.EncodeToString(h.Sum(nil))
}

// credentialEpoch hashes the credential values a live harness holds, so a
// rotated key forces a fresh harness. Only the hash is kept.
func credentialEpoch(env map[string]string, r *wire.Request) string {
	var parts []string
	for _, k := range slices.Sorted(maps.Keys(env)) {
		parts = append(parts, k+"="+env[k])
	}
	for _, s := range r.MCPServers {
		for _, c := range s.Connection.Credentials {
			parts = append(parts, s.Name+"/"+c.Binding.Name+"="+c.Value)
		}
		for k, v := range s.Connection.Headers {
			parts = append(parts, s.Name+"/h/"+k+"="+v)
		}
	}
	sort.Strings(parts)
	return hash(parts)
}

func hash(v any) string {
	b, _ := json.Marshal(v) // encoding/json sorts map keys: canonical enough
	sum := sha256.Sum256(b)
	return hex.EncodeToString(sum[:])
}
