// Package wire holds the request, result and event shapes of the
// Agenta-compatible HTTP contract (docs/contract.md). Field names are
// the wire's; decoding and validation live in Decode, which is the only
// way a request enters the runner.
package wire

import "encoding/json"

// Request is one turn, as the platform posts it to /run or /stream.
type Request struct {
	Harness           string             `json:"harness,omitempty"`
	Sandbox           string             `json:"sandbox,omitempty"`
	SessionID         string             `json:"sessionId,omitempty"`
	TurnID            string             `json:"turnId,omitempty"`
	ProjectID         string             `json:"projectId,omitempty"`
	StreamID          string             `json:"streamId,omitempty"`
	AgentsMD          string             `json:"agentsMd,omitempty"`
	SystemPrompt      string             `json:"systemPrompt,omitempty"`
	AppendSystem      string             `json:"appendSystemPrompt,omitempty"`
	Model             string             `json:"model,omitempty"`
	ModelCapabilities json.RawMessage    `json:"modelCapabilities,omitempty"`
	HarnessMode       string             `json:"harnessMode,omitempty"`
	Connection        json.RawMessage    `json:"connection,omitempty"`
	ModelConnection   *ModelConnection   `json:"modelConnection,omitempty"`
	Messages          []Message          `json:"messages,omitempty"`
	Tools             json.RawMessage    `json:"tools,omitempty"` // deprecated, ignored
	Skills            json.RawMessage    `json:"skills,omitempty"`
	CustomTools       []ToolSpec         `json:"customTools,omitempty"`
	ToolCallback      *ToolCallback      `json:"toolCallback,omitempty"`
	MCPServers        []MCPServer        `json:"mcpServers,omitempty"`
	Permissions       *Permissions       `json:"permissions,omitempty"`
	SandboxPermission *SandboxPermission `json:"sandboxPermission,omitempty"`
	HarnessFiles      []HarnessFile      `json:"harnessFiles,omitempty"`
	Context           json.RawMessage    `json:"context,omitempty"`
	Telemetry         json.RawMessage    `json:"telemetry,omitempty"`
	RunContext        *RunContext        `json:"runContext,omitempty"`
	EffectiveParams   json.RawMessage    `json:"effectiveParameters,omitempty"`
}

// Message is one chat message. Content is a string or a list of blocks;
// Blocks holds it normalised either way.
type Message struct {
	Role    string         `json:"role"`
	Content MessageContent `json:"content"`
}

// MessageContent is a message's content: a plain string or content blocks.
type MessageContent struct {
	Text   string
	Blocks []ContentBlock
	IsText bool
}

func (c MessageContent) MarshalJSON() ([]byte, error) {
	if c.IsText || c.Blocks == nil {
		return json.Marshal(c.Text)
	}
	return json.Marshal(c.Blocks)
}

func (c *MessageContent) UnmarshalJSON(b []byte) error {
	if len(b) > 0 && b[0] == '"' {
		c.IsText = true
		c.Blocks = nil
		// The history fast path's reader (history.go): a text without
		// escapes is taken as it is, without a second parse.
		p := scan{b: b, s: string(b)}
		if text, ok := p.str(); ok && p.i == len(b) {
			c.Text = text
			return nil
		}
		return json.Unmarshal(b, &c.Text)
	}
	if string(b) == "null" {
		*c = MessageContent{IsText: true} // absent content is empty text
		return nil
	}
	c.IsText = false
	return json.Unmarshal(b, &c.Blocks)
}

// ContentBlock is one block of a message (docs/contract.md, The request). Unknown fields are
// kept in Raw so a block can be passed to the harness untouched.
type ContentBlock struct {
	Type       string          `json:"type"`
	Text       string          `json:"text,omitempty"`
	Data       string          `json:"data,omitempty"`
	MimeType   string          `json:"mimeType,omitempty"`
	URI        string          `json:"uri,omitempty"`
	Resource   json.RawMessage `json:"resource,omitempty"`
	ToolCallID string          `json:"toolCallId,omitempty"`
	ToolName   string          `json:"toolName,omitempty"`
	Input      json.RawMessage `json:"input,omitempty"`
	Output     json.RawMessage `json:"output,omitempty"`
	IsError    bool            `json:"isError,omitempty"`
	// attachment blocks
	AttachmentID string `json:"attachmentId,omitempty"`
	Filename     string `json:"filename,omitempty"`
	Size         int64  `json:"size,omitempty"`
}

// ModelConnection is the resolved model route and its credentials (docs/contract.md, The request).
type ModelConnection struct {
	Provider       string            `json:"provider"`
	Deployment     string            `json:"deployment"`
	Endpoint       *Endpoint         `json:"endpoint,omitempty"`
	CredentialMode string            `json:"credentialMode,omitempty"`
	Environment    map[string]string `json:"environment,omitempty"`
	Credentials    []Credential      `json:"credentials,omitempty"`
}

// Endpoint is where the model provider is reached.
type Endpoint struct {
	BaseURL    string            `json:"baseUrl,omitempty"`
	APIVersion string            `json:"apiVersion,omitempty"`
	Region     string            `json:"region,omitempty"`
	Headers    map[string]string `json:"headers,omitempty"`
}

// Credential is one secret value bound to an environment variable or header.
type Credential struct {
	Binding Binding `json:"binding"`
	Value   string  `json:"value"`
	Usage   string  `json:"usage"`
}

// Binding says where a credential goes.
type Binding struct {
	Kind string `json:"kind"`
	Name string `json:"name"`
}

// ToolSpec is a resolved tool the runner serves to the harness (docs/contract.md, The request).
type ToolSpec struct {
	Name            string          `json:"name"`
	Description     string          `json:"description,omitempty"`
	InputSchema     json.RawMessage `json:"inputSchema,omitempty"`
	InputSchemaAlt  json.RawMessage `json:"input_schema,omitempty"`
	Kind            string          `json:"kind,omitempty"`
	CallRef         string          `json:"callRef,omitempty"`
	Call            json.RawMessage `json:"call,omitempty"`
	ContextBindings json.RawMessage `json:"contextBindings,omitempty"`
	TimeoutMS       int             `json:"timeoutMs,omitempty"`
	EphemeralArgs   []string        `json:"ephemeralArgs,omitempty"`
	Render          json.RawMessage `json:"render,omitempty"`
	ReadOnly        bool            `json:"readOnly,omitempty"`
	Permission      string          `json:"permission,omitempty"`
}

// Schema returns the tool's input schema, whichever spelling the caller used.
func (t ToolSpec) Schema() json.RawMessage {
	if len(t.InputSchema) > 0 {
		return t.InputSchema
	}
	return t.InputSchemaAlt
}

// ToolCallback is where runner-executed tool calls are posted.
type ToolCallback struct {
	Endpoint      string `json:"endpoint"`
	Authorization string `json:"authorization,omitempty"`
}

// MCPServer is a user MCP server (HTTP only; docs/contract.md, The request).
type MCPServer struct {
	Name       string        `json:"name"`
	Connection MCPConnection `json:"connection"`
	Policy     *MCPPolicy    `json:"policy,omitempty"`
}

// MCPConnection is how to reach a user MCP server.
type MCPConnection struct {
	Type        string            `json:"type"`
	URL         string            `json:"url"`
	Headers     map[string]string `json:"headers,omitempty"`
	Credentials []Credential      `json:"credentials,omitempty"`
}

// MCPPolicy carries the server's tool selection and permission.
type MCPPolicy struct {
	Tools      json.RawMessage `json:"tools,omitempty"`
	Permission string          `json:"permission,omitempty"`
}

// Permissions is the request's permission plan (docs/contract.md, Permissions).
type Permissions struct {
	Default string           `json:"default,omitempty"`
	Rules   []PermissionRule `json:"rules,omitempty"`
}

// PermissionRule maps a tool pattern to a permission.
type PermissionRule struct {
	Pattern    string `json:"pattern"`
	Permission string `json:"permission"`
}

// SandboxPermission is the per-request sandbox policy.
type SandboxPermission struct {
	Network     *NetworkPermission `json:"network,omitempty"`
	Filesystem  string             `json:"filesystem,omitempty"`
	Enforcement string             `json:"enforcement,omitempty"`
}

// NetworkPermission is the network part of the sandbox policy.
type NetworkPermission struct {
	Mode      string   `json:"mode,omitempty"`
	Allowlist []string `json:"allowlist,omitempty"`
}

// HarnessFile is a file written into the working directory before the session opens.
type HarnessFile struct {
	Path    string `json:"path"`
	Content string `json:"content"`
}

// RunContext is the platform's context; only project and session are read.
type RunContext struct {
	Project *struct {
		ID string `json:"id"`
	} `json:"project,omitempty"`
	Session *struct {
		ID string `json:"id"`
	} `json:"session,omitempty"`
	Run      json.RawMessage `json:"run,omitempty"`
	Workflow json.RawMessage `json:"workflow,omitempty"`
	Trace    json.RawMessage `json:"trace,omitempty"`
}
