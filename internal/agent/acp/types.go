package acp

import (
	"encoding/json"
	"maps"
	"slices"

	"github.com/agentrunner/runner/internal/agent"
	"github.com/agentrunner/runner/internal/wire"
)

type wireCaps = wire.Capabilities

type implementation struct {
	Name    string `json:"name"`
	Version string `json:"version,omitempty"`
}

type fsCapabilities struct {
	ReadTextFile  bool `json:"readTextFile"`
	WriteTextFile bool `json:"writeTextFile"`
}

type clientCapabilities struct {
	FS       fsCapabilities    `json:"fs"`
	Terminal bool              `json:"terminal"`
	Auth     *authCapabilities `json:"auth,omitempty"`
}

// authCapabilities asks for claude-agent-acp's gateway auth method
// (`auth._meta.gateway`), offered only to a client that says it can use it.
type authCapabilities struct {
	Meta map[string]any `json:"_meta,omitempty"`
}

// authenticateParams is authenticate with the "gateway" method.
type authenticateParams struct {
	MethodID string         `json:"methodId"`
	Meta     map[string]any `json:"_meta,omitempty"`
}

type initializeParams struct {
	ProtocolVersion    int                `json:"protocolVersion"`
	ClientCapabilities clientCapabilities `json:"clientCapabilities"`
	ClientInfo         implementation     `json:"clientInfo"`
}

type agentCapabilities struct {
	LoadSession        bool `json:"loadSession"`
	PromptCapabilities struct {
		Image           bool `json:"image"`
		Audio           bool `json:"audio"`
		EmbeddedContext bool `json:"embeddedContext"`
	} `json:"promptCapabilities"`
	MCPCapabilities struct {
		HTTP bool `json:"http"`
		SSE  bool `json:"sse"`
	} `json:"mcpCapabilities"`
}

type initializeResult struct {
	ProtocolVersion   int               `json:"protocolVersion"`
	AgentCapabilities agentCapabilities `json:"agentCapabilities"`
	AgentInfo         implementation    `json:"agentInfo"`
	AuthMethods       []authMethod      `json:"authMethods"`
}

type authMethod struct {
	ID   string `json:"id"`
	Name string `json:"name"`
}

type nameValue struct {
	Name  string `json:"name"`
	Value string `json:"value"`
}

// mcpServer is either ACP shape: stdio (no type field) or http.
type mcpServer struct {
	Type    string      `json:"type,omitempty"`
	Name    string      `json:"name"`
	Command string      `json:"command,omitempty"`
	Args    []string    `json:"args,omitempty"`
	Env     []nameValue `json:"env,omitempty"`
	URL     string      `json:"url,omitempty"`
	Headers []nameValue `json:"headers,omitempty"`
}

func (m mcpServer) MarshalJSON() ([]byte, error) {
	if m.Type == "http" {
		return json.Marshal(struct {
			Type    string      `json:"type"`
			Name    string      `json:"name"`
			URL     string      `json:"url"`
			Headers []nameValue `json:"headers"`
		}{m.Type, m.Name, m.URL, nonNil(m.Headers)})
	}
	return json.Marshal(struct {
		Name    string      `json:"name"`
		Command string      `json:"command"`
		Args    []string    `json:"args"`
		Env     []nameValue `json:"env"`
	}{m.Name, m.Command, nonNilS(m.Args), nonNil(m.Env)})
}

func nonNil(v []nameValue) []nameValue {
	if v == nil {
		return []nameValue{}
	}
	return v
}

func nonNilS(v []string) []string {
	if v == nil {
		return []string{}
	}
	return v
}

func mcpServers(in []agent.MCPServer) []mcpServer {
	out := []mcpServer{}
	for _, s := range in {
		m := mcpServer{Name: s.Name}
		if s.URL != "" {
			m.Type = "http"
			m.URL = s.URL
			for _, k := range slices.Sorted(maps.Keys(s.Headers)) {
				m.Headers = append(m.Headers, nameValue{k, s.Headers[k]})
			}
		} else {
			m.Command = s.Command
			m.Args = s.Args
			for _, k := range slices.Sorted(maps.Keys(s.Env)) {
				m.Env = append(m.Env, nameValue{k, s.Env[k]})
			}
		}
		out = append(out, m)
	}
	return out
}

type newParams struct {
	Cwd        string         `json:"cwd"`
	MCPServers []mcpServer    `json:"mcpServers"`
	Meta       map[string]any `json:"_meta,omitempty"`
}

type loadParams struct {
	SessionID  string         `json:"sessionId"`
	Cwd        string         `json:"cwd"`
	MCPServers []mcpServer    `json:"mcpServers"`
	Meta       map[string]any `json:"_meta,omitempty"`
}

type sessionResult struct {
	SessionID string `json:"sessionId"`
	// Models (ACP's unstable session/set_model) and ConfigOptions (a
	// "model" option, session/set_config_option) are how a harness offers
	// a model choice.
	Models *struct {
		CurrentModelID  string `json:"currentModelId"`
		AvailableModels []struct {
			ModelID string `json:"modelId"`
		} `json:"availableModels"`
	} `json:"models"`
	ConfigOptions []struct {
		ID           string          `json:"id"`
		Category     string          `json:"category"`
		CurrentValue json.RawMessage `json:"currentValue"`
	} `json:"configOptions"`
	Modes *struct {
		CurrentModeID  string `json:"currentModeId"`
		AvailableModes []struct {
			ID   string `json:"id"`
			Name string `json:"name"`
		} `json:"availableModes"`
	} `json:"modes"`
}

type setModelParams struct {
	SessionID string `json:"sessionId"`
	ModelID   string `json:"modelId"`
}

type setConfigParams struct {
	SessionID string `json:"sessionId"`
	ConfigID  string `json:"configId"`
	Value     string `json:"value"`
}

type setModeParams struct {
	SessionID string `json:"sessionId"`
	ModeID    string `json:"modeId"`
}

type promptParams struct {
	SessionID string            `json:"sessionId"`
	Prompt    []json.RawMessage `json:"prompt"`
}

type promptResult struct {
	StopReason string `json:"stopReason"`
	Usage      *struct {
		TotalTokens  int64 `json:"totalTokens"`
		InputTokens  int64 `json:"inputTokens"`
		OutputTokens int64 `json:"outputTokens"`
	} `json:"usage"`
}

type cancelParams struct {
	SessionID string `json:"sessionId"`
}

type updateParams struct {
	SessionID string          `json:"sessionId"`
	Update    json.RawMessage `json:"update"`
}

type permissionParams struct {
	SessionID string `json:"sessionId"`
	ToolCall  struct {
		ToolCallID string          `json:"toolCallId"`
		Title      string          `json:"title"`
		Kind       string          `json:"kind"`
		RawInput   json.RawMessage `json:"rawInput"`
	} `json:"toolCall"`
	Options []agent.PermissionOption `json:"options"`
}

type permissionOutcome struct {
	Outcome  string `json:"outcome"`
	OptionID string `json:"optionId,omitempty"`
}

type permissionResult struct {
	Outcome permissionOutcome `json:"outcome"`
}
