// Package harness is the catalogue of the built-in real harnesses: which
// npm packages make each one, at which pinned versions; installing them
// into the runner's harness dir (Install), reporting what is there (List),
// the command line that starts each one's ACP agent (Resolve, or
// ImageCommand inside an image that has them), the harness's own
// configuration for a model connection (Configure), and the policy that
// turns a request into that configuration (NewConfigurer: which wire API
// and key, the ACP mode, Pi's tools, the check of turns a harness ends
// without saying why). Everything the runner knows of a particular
// harness is here; it has no turn logic.
//
// Every harness installs into its own npm prefix, <dir>/<Dir>, with
// `npm install --prefix`; nothing is ever fetched at turn time (no npx).
// The versions are the Node-20-compatible ones checked in
// docs/harnesses.md.
package harness

import (
	"fmt"
	"slices"
	"strings"
)

// Harness is one catalogue entry.
type Harness struct {
	// Name is the wire id: claude, codex, pi_core, pi_agenta, gemini, opencode.
	Name string
	// Dir is the install directory under the harness dir. pi_core and
	// pi_agenta share "pi".
	Dir string
	// Packages are installed together, at these exact versions.
	Packages []Package
	// Bin is the npm bin (of Packages[0]) that starts the ACP agent, and
	// Args follow it.
	Bin  string
	Args []string
	// APIs are the provider wire APIs the harness can call, the first
	// being its native one.
	APIs []API
}

// Package is an npm package at a pinned version.
type Package struct {
	Name    string
	Version string
}

func (p Package) String() string { return p.Name + "@" + p.Version }

// piPackages are the adapter and the pi CLI it drives. pi-acp 0.0.34, the
// latest, hangs at session/new with pi 0.73.1, and newer pi needs Node 22.
var piPackages = []Package{
	{"pi-acp", "0.0.24"},
	{"@mariozechner/pi-coding-agent", "0.73.1"},
}

var builtin = []Harness{
	{
		Name:     "claude",
		Dir:      "claude",
		Packages: []Package{{"@agentclientprotocol/claude-agent-acp", "0.101.0"}},
		Bin:      "claude-agent-acp",
		APIs:     []API{Anthropic},
	},
	{
		Name:     "codex",
		Dir:      "codex",
		Packages: []Package{{"@agentclientprotocol/codex-acp", "2.6.0"}},
		Bin:      "codex-acp",
		// codex 0.166 rejects wire_api = "chat".
		APIs: []API{OpenAIResponses},
	},
	{
		Name:     "pi_core",
		Dir:      "pi",
		Packages: piPackages,
		Bin:      "pi-acp",
		APIs:     []API{OpenAIChat, OpenAIResponses, Anthropic, Gemini},
	},
	{
		Name:     "pi_agenta",
		Dir:      "pi",
		Packages: piPackages,
		Bin:      "pi-acp",
		APIs:     []API{OpenAIChat, OpenAIResponses, Anthropic, Gemini},
	},
	{
		Name:     "gemini",
		Dir:      "gemini",
		Packages: []Package{{"@google/gemini-cli", "0.61.0"}},
		Bin:      "gemini",
		Args:     []string{"--acp"},
		APIs:     []API{Gemini},
	},
	{
		Name:     "opencode",
		Dir:      "opencode",
		Packages: []Package{{"opencode-ai", "1.18.33"}},
		Bin:      "opencode",
		Args:     []string{"acp"},
		APIs:     []API{OpenAIChat, OpenAIResponses, Anthropic, Gemini},
	},
}

// Builtin returns the catalogue, in a fixed order.
func Builtin() []Harness {
	out := make([]Harness, len(builtin))
	for i, h := range builtin {
		h.Packages = slices.Clone(h.Packages)
		h.Args = slices.Clone(h.Args)
		h.APIs = slices.Clone(h.APIs)
		out[i] = h
	}
	return out
}

// Commands is the launch table: each built-in's command (its adapter's
// bin, which `runner harness install` puts in the harness dir, and its
// arguments), replaced or joined by overrides (the operator's
// AGENTA_RUNNER_HARNESS_<NAME>, by harness name).
func Commands(overrides map[string][]string) map[string][]string {
	out := make(map[string][]string, len(builtin)+len(overrides))
	for _, h := range builtin {
		out[h.Name] = append([]string{h.Bin}, h.Args...)
	}
	for name, cmd := range overrides {
		out[name] = slices.Clone(cmd)
	}
	return out
}

// Lookup returns the catalogue entry for name.
func Lookup(name string) (Harness, bool) {
	for _, h := range Builtin() {
		if h.Name == name {
			return h, true
		}
	}
	return Harness{}, false
}

// Names lists the catalogue's names, in catalogue order.
func Names() []string {
	var out []string
	for _, h := range builtin {
		out = append(out, h.Name)
	}
	return out
}

func unknown(name string) error {
	return fmt.Errorf("unknown harness %q (built-in: %s)", name, strings.Join(Names(), ", "))
}

// ProviderAPIs are the wire APIs a provider speaks, preferred first.
// Providers not listed are taken to be OpenAI-compatible servers (Ollama,
// vLLM, OpenRouter, LM Studio …), which all speak Chat Completions.
// provider is the connection's provider id, lower-cased and trimmed.
func ProviderAPIs(provider, baseURL string) []API {
	switch provider {
	case "anthropic", "claude":
		return []API{Anthropic}
	case "gemini", "google", "google-genai", "googleai", "google-ai-studio":
		return []API{Gemini}
	case "openai":
		if baseURL == "" || strings.Contains(baseURL, "api.openai.com") {
			return []API{OpenAIResponses, OpenAIChat}
		}
	}
	return []API{OpenAIChat, OpenAIResponses}
}
