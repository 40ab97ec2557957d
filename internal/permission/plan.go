package permission

import (
	"strings"

	"github.com/agentrunner/runner/internal/wire"
)

// Permission is what happens to a call.
type Permission string

// Permissions of a verdict. Ask means a person decides.
const (
	Allow Permission = "allow"
	Ask   Permission = "ask"
	Deny  Permission = "deny"
)

// Default modes of a plan: a Permission, or AllowReads.
const (
	// AllowReads allows calls whose read-only hint is true and asks for the rest.
	AllowReads = "allow_reads"
)

// Source says which step of the ladder decided a verdict.
type Source string

// Sources, in the order the ladder consults them.
const (
	SourceSpec    Source = "spec"    // the tool spec's own permission
	SourceServer  Source = "server"  // the owning MCP server's policy.permission
	SourceRule    Source = "rule"    // the strongest matching rule
	SourceDefault Source = "default" // the plan's default mode
	SourceStored  Source = "stored"  // a person's earlier decision (DecideWith only)
)

// Call is one gated tool call, normalised by the caller.
type Call struct {
	// Tool is the stable tool name: the spec name for runner tools, the
	// MCP tool name for user MCP tools, the recorded tool_call name for
	// the harness's own tools (Bash, Read, …).
	Tool string
	// Server is the owning user MCP server's name, empty for other tools.
	Server string
	// ToolCallID is the harness's id for the call, when known; it keys
	// stored decisions on a warm resume.
	ToolCallID string
	// Args is the call's raw JSON arguments. Prefix rules match the first
	// string value in it; stored decisions key on its canonical form.
	Args []byte
	// ReadOnly is the caller's read-only hint (catalog or harness). The
	// plan also knows the hints of runner tool specs and Pi built-ins.
	ReadOnly bool
}

// Verdict is the decision for one call and what decided it.
type Verdict struct {
	Permission Permission
	Source     Source
	// Rule names the deciding input for audit: the spec or server name,
	// the rule pattern, or the default mode.
	Rule string
}

// Plan is a turn's permission plan. The zero Plan is the absent plan
// (allow_reads, no rules).
type Plan struct {
	mode    string
	rules   []wire.PermissionRule
	specs   map[string]specHint
	servers map[string]Permission
}

type specHint struct {
	permission Permission // "" when the spec sets none
	readOnly   bool
}

// New builds the plan of a turn. An absent p means allow_reads with no
// rules; an unknown default mode means ask, because an unreadable policy
// must fail toward asking a person, never toward running tools. Rules
// with an unknown permission are dropped. A spec or server permission
// that is set but unknown counts as ask, for the same reason.
func New(p *wire.Permissions, specs []wire.ToolSpec, servers []wire.MCPServer) Plan {
	pl := Plan{mode: AllowReads}
	if p != nil {
		switch p.Default {
		case "":
		case string(Allow), string(Ask), string(Deny), AllowReads:
			pl.mode = p.Default
		default:
			pl.mode = string(Ask)
			p = &wire.Permissions{} // a malformed plan keeps no rules
		}
		for _, r := range p.Rules {
			if r.Pattern != "" && parsePermission(r.Permission) != "" {
				pl.rules = append(pl.rules, r)
			}
		}
	}
	if len(specs) > 0 {
		pl.specs = make(map[string]specHint, len(specs))
		for _, s := range specs {
			pl.specs[s.Name] = specHint{permission: lenient(s.Permission), readOnly: s.ReadOnly}
		}
	}
	for _, s := range servers {
		if s.Policy == nil || s.Policy.Permission == "" {
			continue
		}
		if pl.servers == nil {
			pl.servers = make(map[string]Permission)
		}
		pl.servers[s.Name] = lenient(s.Policy.Permission)
	}
	return pl
}

// DenyAll is the operator kill switch's plan: every call is denied.
func DenyAll() Plan { return Plan{mode: string(Deny)} }

// Mode returns the plan's default mode.
func (p Plan) Mode() string {
	if p.mode == "" {
		return AllowReads
	}
	return p.mode
}

// Decide returns the effective permission of c. The first step that has
// an answer wins: the spec's permission, the owning server's permission,
// the strongest matching rule (deny > ask > allow), the default mode.
func (p Plan) Decide(c Call) Verdict {
	hint, isSpec := p.specs[c.Tool]
	if c.Server == "" && isSpec && hint.permission != "" {
		return Verdict{Permission: hint.permission, Source: SourceSpec, Rule: c.Tool}
	}
	if c.Server != "" {
		if perm, ok := p.servers[c.Server]; ok {
			return Verdict{Permission: perm, Source: SourceServer, Rule: c.Server}
		}
	}
	if v, ok := p.matchRules(c); ok {
		return v
	}
	mode := p.Mode()
	if mode != AllowReads {
		return Verdict{Permission: Permission(mode), Source: SourceDefault, Rule: mode}
	}
	readOnly := c.ReadOnly
	if c.Server == "" && isSpec && hint.readOnly {
		readOnly = true
	}
	if b, ok := piBuiltin(c.Tool); ok && c.Server == "" && b.readOnly {
		readOnly = true
	}
	if readOnly {
		return Verdict{Permission: Allow, Source: SourceDefault, Rule: AllowReads}
	}
	return Verdict{Permission: Ask, Source: SourceDefault, Rule: AllowReads}
}

// DecideWith is Decide, then, for an ask, the stored decision for this
// exact call if d holds one (consuming it). The effective permission is
// computed first so a plan changed to deny beats an old approval.
func (p Plan) DecideWith(c Call, d *Decisions) Verdict {
	v := p.Decide(c)
	if v.Permission != Ask || d == nil {
		return v
	}
	approved, ok := d.Take(c)
	if !ok {
		return v
	}
	if approved {
		return Verdict{Permission: Allow, Source: SourceStored, Rule: v.Rule}
	}
	return Verdict{Permission: Deny, Source: SourceStored, Rule: v.Rule}
}

var rank = map[Permission]int{Allow: 0, Ask: 1, Deny: 2}

func (p Plan) matchRules(c Call) (Verdict, bool) {
	var best Verdict
	found := false
	for _, r := range p.rules {
		if !ruleMatches(r.Pattern, c) {
			continue
		}
		perm := parsePermission(r.Permission)
		if !found || rank[perm] > rank[best.Permission] {
			best = Verdict{Permission: perm, Source: SourceRule, Rule: r.Pattern}
			found = true
		}
	}
	return best, found
}

// ruleMatches matches `Tool` or `Tool(prefix:*)`. The prefix is matched
// against the first string argument; a call whose arguments hold no
// string does not match, so it falls to the default instead of guessing.
func ruleMatches(pattern string, c Call) bool {
	name, prefix, isPrefix := parsePattern(pattern)
	if !sameTool(name, c.Tool) {
		return false
	}
	if !isPrefix {
		return true
	}
	arg, ok := firstString(c.Args)
	return ok && strings.HasPrefix(arg, prefix)
}

func parsePattern(pattern string) (name, prefix string, isPrefix bool) {
	open := strings.IndexByte(pattern, '(')
	if open <= 0 || !strings.HasSuffix(pattern, ":*)") || len(pattern) < open+4 {
		return pattern, "", false
	}
	return pattern[:open], pattern[open+1 : len(pattern)-3], true
}

// sameTool compares tool names case-sensitively, except Pi's built-ins,
// which answer to their lower-case and rule names alike (read, Read, READ).
func sameTool(pattern, tool string) bool {
	if pattern == tool {
		return true
	}
	a, okA := piBuiltin(pattern)
	b, okB := piBuiltin(tool)
	return okA && okB && a.rule == b.rule
}

func parsePermission(s string) Permission {
	switch p := Permission(s); p {
	case Allow, Ask, Deny:
		return p
	}
	return ""
}

// lenient reads a spec or server permission: empty stays empty, an
// unknown value asks.
func lenient(s string) Permission {
	if s == "" {
		return ""
	}
	if p := parsePermission(s); p != "" {
		return p
	}
	return Ask
}

type builtin struct {
	rule     string
	readOnly bool
}

// piBuiltins are Pi's own tools, which rules name by their capitalised
// rule name (docs/contract.md, Permissions).
var piBuiltins = map[string]builtin{
	"read":  {"Read", true},
	"bash":  {"Bash", false},
	"edit":  {"Edit", false},
	"write": {"Write", false},
	"grep":  {"Grep", true},
	"find":  {"Find", true},
	"ls":    {"Ls", true},
}

func piBuiltin(name string) (builtin, bool) {
	b, ok := piBuiltins[strings.ToLower(name)]
	return b, ok
}
