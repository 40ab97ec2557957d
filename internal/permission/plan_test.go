package permission_test

import (
	"encoding/json"
	"testing"

	"github.com/google/go-cmp/cmp"

	"github.com/agentrunner/runner/internal/permission"
	"github.com/agentrunner/runner/internal/wire"
)

func rules(pairs ...string) []wire.PermissionRule {
	var rs []wire.PermissionRule
	for i := 0; i+1 < len(pairs); i += 2 {
		rs = append(rs, wire.PermissionRule{Pattern: pairs[i], Permission: pairs[i+1]})
	}
	return rs
}

func TestDecide(t *testing.T) {
	t.Parallel()
	specs := []wire.ToolSpec{
		{Name: "create_issue", Permission: "deny"},
		{Name: "get_issue", ReadOnly: true},
		{Name: "post_comment"},
		{Name: "weird", Permission: "sometimes"},
	}
	servers := []wire.MCPServer{
		{Name: "github", Policy: &wire.MCPPolicy{Permission: "allow"}},
		{Name: "linear"},
	}
	tests := []struct {
		name  string
		perms *wire.Permissions
		call  permission.Call
		want  permission.Verdict
	}{
		{
			name: "absent plan allows reads",
			call: permission.Call{Tool: "Read", ReadOnly: true},
			want: permission.Verdict{Permission: permission.Allow, Source: permission.SourceDefault, Rule: "allow_reads"},
		},
		{
			name: "absent plan asks for writes",
			call: permission.Call{Tool: "Write"},
			want: permission.Verdict{Permission: permission.Ask, Source: permission.SourceDefault, Rule: "allow_reads"},
		},
		{
			name:  "empty default is allow_reads",
			perms: &wire.Permissions{},
			call:  permission.Call{Tool: "Write"},
			want:  permission.Verdict{Permission: permission.Ask, Source: permission.SourceDefault, Rule: "allow_reads"},
		},
		{
			name:  "malformed default asks and drops rules",
			perms: &wire.Permissions{Default: "yolo", Rules: rules("Read", "allow")},
			call:  permission.Call{Tool: "Read", ReadOnly: true},
			want:  permission.Verdict{Permission: permission.Ask, Source: permission.SourceDefault, Rule: "ask"},
		},
		{
			name:  "default allow",
			perms: &wire.Permissions{Default: "allow"},
			call:  permission.Call{Tool: "Write"},
			want:  permission.Verdict{Permission: permission.Allow, Source: permission.SourceDefault, Rule: "allow"},
		},
		{
			name:  "default deny beats read-only hint",
			perms: &wire.Permissions{Default: "deny"},
			call:  permission.Call{Tool: "Read", ReadOnly: true},
			want:  permission.Verdict{Permission: permission.Deny, Source: permission.SourceDefault, Rule: "deny"},
		},
		{
			name:  "spec read-only hint under allow_reads",
			perms: &wire.Permissions{Default: "allow_reads"},
			call:  permission.Call{Tool: "get_issue"},
			want:  permission.Verdict{Permission: permission.Allow, Source: permission.SourceDefault, Rule: "allow_reads"},
		},
		{
			name: "pi built-in read-only under allow_reads",
			call: permission.Call{Tool: "grep"},
			want: permission.Verdict{Permission: permission.Allow, Source: permission.SourceDefault, Rule: "allow_reads"},
		},
		{
			name:  "spec permission beats rules",
			perms: &wire.Permissions{Default: "allow", Rules: rules("create_issue", "allow")},
			call:  permission.Call{Tool: "create_issue"},
			want:  permission.Verdict{Permission: permission.Deny, Source: permission.SourceSpec, Rule: "create_issue"},
		},
		{
			name: "unknown spec permission asks",
			call: permission.Call{Tool: "weird", ReadOnly: true},
			want: permission.Verdict{Permission: permission.Ask, Source: permission.SourceSpec, Rule: "weird"},
		},
		{
			name:  "server permission beats rules",
			perms: &wire.Permissions{Rules: rules("list_repos", "deny")},
			call:  permission.Call{Tool: "list_repos", Server: "github"},
			want:  permission.Verdict{Permission: permission.Allow, Source: permission.SourceServer, Rule: "github"},
		},
		{
			name:  "server tool named like a spec is not the spec",
			perms: &wire.Permissions{Default: "allow"},
			call:  permission.Call{Tool: "create_issue", Server: "linear"},
			want:  permission.Verdict{Permission: permission.Allow, Source: permission.SourceDefault, Rule: "allow"},
		},
		{
			name:  "server without permission falls to rules",
			perms: &wire.Permissions{Rules: rules("list_issues", "allow")},
			call:  permission.Call{Tool: "list_issues", Server: "linear"},
			want:  permission.Verdict{Permission: permission.Allow, Source: permission.SourceRule, Rule: "list_issues"},
		},
		{
			name:  "rule beats default",
			perms: &wire.Permissions{Default: "deny", Rules: rules("post_comment", "allow")},
			call:  permission.Call{Tool: "post_comment"},
			want:  permission.Verdict{Permission: permission.Allow, Source: permission.SourceRule, Rule: "post_comment"},
		},
		{
			name:  "deny beats ask beats allow among rules",
			perms: &wire.Permissions{Rules: rules("Bash", "allow", "Bash(rm:*)", "deny", "Bash(r:*)", "ask")},
			call:  permission.Call{Tool: "Bash", Args: []byte(`{"command":"rm -rf /"}`)},
			want:  permission.Verdict{Permission: permission.Deny, Source: permission.SourceRule, Rule: "Bash(rm:*)"},
		},
		{
			name:  "ask beats allow among rules",
			perms: &wire.Permissions{Rules: rules("Bash", "allow", "Bash(git push:*)", "ask")},
			call:  permission.Call{Tool: "Bash", Args: []byte(`{"command":"git push origin"}`)},
			want:  permission.Verdict{Permission: permission.Ask, Source: permission.SourceRule, Rule: "Bash(git push:*)"},
		},
		{
			name:  "prefix rule does not match other prefix",
			perms: &wire.Permissions{Default: "allow", Rules: rules("Bash(rm:*)", "deny")},
			call:  permission.Call{Tool: "Bash", Args: []byte(`{"command":"ls"}`)},
			want:  permission.Verdict{Permission: permission.Allow, Source: permission.SourceDefault, Rule: "allow"},
		},
		{
			name:  "prefix rule uses the first string in document order",
			perms: &wire.Permissions{Default: "allow", Rules: rules("Bash(rm:*)", "deny")},
			call:  permission.Call{Tool: "Bash", Args: []byte(`{"timeout":5,"command":"rm x","description":"ls"}`)},
			want:  permission.Verdict{Permission: permission.Deny, Source: permission.SourceRule, Rule: "Bash(rm:*)"},
		},
		{
			name:  "prefix rule with uninspectable args falls to default",
			perms: &wire.Permissions{Default: "allow", Rules: rules("Bash(rm:*)", "deny")},
			call:  permission.Call{Tool: "Bash", Args: []byte(`{"n":1}`)},
			want:  permission.Verdict{Permission: permission.Allow, Source: permission.SourceDefault, Rule: "allow"},
		},
		{
			name:  "prefix rule with malformed args falls to default",
			perms: &wire.Permissions{Default: "allow", Rules: rules("Bash(rm:*)", "deny")},
			call:  permission.Call{Tool: "Bash", Args: []byte(`{"command":`)},
			want:  permission.Verdict{Permission: permission.Allow, Source: permission.SourceDefault, Rule: "allow"},
		},
		{
			name:  "prefix rule on a string array",
			perms: &wire.Permissions{Default: "allow", Rules: rules("run(rm:*)", "deny")},
			call:  permission.Call{Tool: "run", Args: []byte(`[1,"rm -f a"]`)},
			want:  permission.Verdict{Permission: permission.Deny, Source: permission.SourceRule, Rule: "run(rm:*)"},
		},
		{
			name:  "rule names are case-sensitive for ordinary tools",
			perms: &wire.Permissions{Default: "allow", Rules: rules("post_Comment", "deny")},
			call:  permission.Call{Tool: "post_comment"},
			want:  permission.Verdict{Permission: permission.Allow, Source: permission.SourceDefault, Rule: "allow"},
		},
		{
			name:  "pi built-ins match their rule name case-insensitively",
			perms: &wire.Permissions{Default: "allow", Rules: rules("Bash(rm:*)", "deny")},
			call:  permission.Call{Tool: "bash", Args: []byte(`{"command":"rm a"}`)},
			want:  permission.Verdict{Permission: permission.Deny, Source: permission.SourceRule, Rule: "Bash(rm:*)"},
		},
		{
			name:  "rules with unknown permissions are dropped",
			perms: &wire.Permissions{Default: "allow", Rules: rules("Write", "never")},
			call:  permission.Call{Tool: "Write"},
			want:  permission.Verdict{Permission: permission.Allow, Source: permission.SourceDefault, Rule: "allow"},
		},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			got := permission.New(tt.perms, specs, servers).Decide(tt.call)
			if diff := cmp.Diff(tt.want, got); diff != "" {
				t.Errorf("Decide(%+v) (-want +got):\n%s", tt.call, diff)
			}
		})
	}
}

func TestZeroPlanIsAllowReads(t *testing.T) {
	t.Parallel()
	var p permission.Plan
	if got := p.Decide(permission.Call{Tool: "x"}).Permission; got != permission.Ask {
		t.Errorf("zero plan write = %q, want ask", got)
	}
	if got := p.Decide(permission.Call{Tool: "x", ReadOnly: true}).Permission; got != permission.Allow {
		t.Errorf("zero plan read = %q, want allow", got)
	}
}

func TestDenyAll(t *testing.T) {
	t.Parallel()
	got := permission.DenyAll().Decide(permission.Call{Tool: "Read", ReadOnly: true})
	if got.Permission != permission.Deny {
		t.Errorf("DenyAll = %+v, want deny", got)
	}
}

func toolResult(id, name, input, output string) wire.ContentBlock {
	b := wire.ContentBlock{Type: "tool_result", ToolCallID: id, ToolName: name, Output: json.RawMessage(output)}
	if input != "" {
		b.Input = json.RawMessage(input)
	}
	return b
}

func msgs(blocks ...wire.ContentBlock) []wire.Message {
	return []wire.Message{{Role: "user", Content: wire.MessageContent{Blocks: blocks}}}
}

func TestDecideWithStoredDecisions(t *testing.T) {
	t.Parallel()
	history := msgs(
		wire.ContentBlock{Type: "tool_call", ToolCallID: "c1", ToolName: "post_comment", Input: json.RawMessage(`{"body":"hi","n":1}`)},
		toolResult("c1", "", "", `{"approved":true}`),
		toolResult("c2", "Bash", `{"command":"rm a","description":"cleanup"}`, `{"approved":false}`),
		toolResult("c3", "deleted", `{}`, `"{\"approved\":true}"`),
		toolResult("c4", "create_issue", `{}`, `{"approved":true}`),
		toolResult("c5", "browser", `{}`, `{"url":"x"}`), // a client output, not an approval
	)
	specs := []wire.ToolSpec{{Name: "create_issue", Permission: "deny"}}
	tests := []struct {
		name string
		call permission.Call
		want permission.Verdict
	}{
		{
			name: "approval by call key on a cold resume (new id, keys reordered, 1.0 == 1)",
			call: permission.Call{Tool: "post_comment", ToolCallID: "new", Args: []byte(`{"n":1.0,"body":"hi"}`)},
			want: permission.Verdict{Permission: permission.Allow, Source: permission.SourceStored, Rule: "allow_reads"},
		},
		{
			name: "refusal by call key, bash projected to its command",
			call: permission.Call{Tool: "bash", Args: []byte(`{"command":"rm a","description":"other"}`)},
			want: permission.Verdict{Permission: permission.Deny, Source: permission.SourceStored, Rule: "allow_reads"},
		},
		{
			name: "approval as a JSON string, by call id",
			call: permission.Call{Tool: "renamed", ToolCallID: "c3"},
			want: permission.Verdict{Permission: permission.Allow, Source: permission.SourceStored, Rule: "allow_reads"},
		},
		{
			name: "different args pause anew",
			call: permission.Call{Tool: "post_comment", Args: []byte(`{"body":"other"}`)},
			want: permission.Verdict{Permission: permission.Ask, Source: permission.SourceDefault, Rule: "allow_reads"},
		},
		{
			name: "policy deny beats an old approval",
			call: permission.Call{Tool: "create_issue", ToolCallID: "c4", Args: []byte(`{}`)},
			want: permission.Verdict{Permission: permission.Deny, Source: permission.SourceSpec, Rule: "create_issue"},
		},
		{
			name: "non-approval tool results are not decisions",
			call: permission.Call{Tool: "browser", ToolCallID: "c5", Args: []byte(`{}`)},
			want: permission.Verdict{Permission: permission.Ask, Source: permission.SourceDefault, Rule: "allow_reads"},
		},
	}
	d := permission.ParseDecisions(history)
	if got, want := d.Len(), 4; got != want {
		t.Fatalf("Len = %d, want %d", got, want)
	}
	plan := permission.New(nil, specs, nil)
	for _, tt := range tests {
		// Sequential: the cases share d and consume from it.
		got := plan.DecideWith(tt.call, d)
		if diff := cmp.Diff(tt.want, got); diff != "" {
			t.Errorf("%s: DecideWith (-want +got):\n%s", tt.name, diff)
		}
	}
	// Each decision is consumed once.
	again := plan.DecideWith(permission.Call{Tool: "post_comment", ToolCallID: "c1", Args: []byte(`{"body":"hi","n":1}`)}, d)
	if again.Permission != permission.Ask {
		t.Errorf("second use of approval = %+v, want ask", again)
	}
	if got, want := d.Len(), 1; got != want { // c4 was never consumed: deny came first
		t.Errorf("Len after = %d, want %d", got, want)
	}
}

func TestDecisionsAddAndCodexWrapper(t *testing.T) {
	t.Parallel()
	d := permission.ParseDecisions(nil)
	d.Add("id1", "mcp_tool", []byte(`{"server":"s","tool":"t","arguments":{"a":1}}`), true)
	approved, ok := d.Take(permission.Call{Tool: "mcp_tool", Args: []byte(`{"a":1}`)})
	if !ok || !approved {
		t.Errorf("Take by unwrapped codex args = %v,%v, want approved", approved, ok)
	}
	if _, ok := d.Take(permission.Call{Tool: "mcp_tool", ToolCallID: "id1"}); ok {
		t.Error("decision taken twice through its id")
	}
	var nilD *permission.Decisions
	if _, ok := nilD.Take(permission.Call{Tool: "x"}); ok {
		t.Error("nil Decisions returned a decision")
	}
}

func TestCallKey(t *testing.T) {
	t.Parallel()
	a, okA := permission.CallKey("t", nil)
	b, okB := permission.CallKey("t", []byte(`null`))
	c, okC := permission.CallKey("t", []byte(` {} `))
	if !okA || !okB || !okC || a != b || b != c {
		t.Errorf("absent, null and {} keys differ: %q %q %q", a, b, c)
	}
	if _, ok := permission.CallKey("", []byte(`{}`)); ok {
		t.Error("empty name keyed")
	}
	if _, ok := permission.CallKey("t", []byte(`{} {}`)); ok {
		t.Error("trailing data keyed")
	}
	x, _ := permission.CallKey("t", []byte(`{"a":[1,{"c":2,"b":"é"}]}`))
	y, _ := permission.CallKey("t", []byte(`{ "a" : [ 1e0 , { "b":"\u00e9","c":2.0 } ] }`))
	if x != y {
		t.Errorf("equivalent args keyed differently: %q vs %q", x, y)
	}
}

func TestSplitMCPName(t *testing.T) {
	t.Parallel()
	tests := []struct {
		in           string
		server, tool string
		ok           bool
	}{
		{"mcp__agenta-tools__get_issue", "agenta-tools", "get_issue", true},
		{"mcp__gh__a__b", "gh", "a__b", true},
		{"Bash", "", "", false},
		{"mcp____x", "", "", false},
	}
	for _, tt := range tests {
		s, tl, ok := permission.SplitMCPName(tt.in)
		if s != tt.server || tl != tt.tool || ok != tt.ok {
			t.Errorf("SplitMCPName(%q) = %q,%q,%v", tt.in, s, tl, ok)
		}
	}
}
