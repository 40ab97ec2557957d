package runner

import (
	"fmt"
	"maps"
	"net/url"
	"slices"
	"strings"

	"github.com/agentrunner/runner/internal/errdefs"
	"github.com/agentrunner/runner/internal/wire"
)

// materialize validates a model connection and turns it into the harness
// environment (docs/contract.md, The request).
func materialize(mc *wire.ModelConnection) (map[string]string, error) {
	env := map[string]string{}
	if mc == nil {
		return env, nil
	}
	bad := func(format string, a ...any) error {
		return errdefs.Invalidf("modelConnection."+format, a...)
	}
	if strings.TrimSpace(mc.Provider) == "" {
		return nil, bad("provider: required")
	}
	if strings.TrimSpace(mc.Deployment) == "" {
		return nil, bad("deployment: required")
	}
	mode := mc.CredentialMode
	if mode == "" {
		mode = "env"
		if len(mc.Credentials) == 0 {
			mode = "none"
		}
	}
	switch mode {
	case "env":
		if len(mc.Credentials) == 0 {
			return nil, bad("credentials: credentialMode \"env\" needs at least one credential")
		}
	case "none", "runtime_provided":
		if len(mc.Credentials) > 0 {
			return nil, bad("credentials: credentialMode %q does not take credentials", mode)
		}
	default:
		return nil, bad("credentialMode: %q is not one of env, runtime_provided, none", mode)
	}
	for _, k := range slices.Sorted(maps.Keys(mc.Environment)) {
		v := mc.Environment[k]
		if err := checkEnvName(k); err != nil {
			return nil, bad("environment: %v", err)
		}
		if v == "" {
			return nil, bad("environment.%s: empty value", k)
		}
		env[k] = v
	}
	for i, c := range mc.Credentials {
		if c.Binding.Kind != "environment" {
			return nil, bad("credentials[%d].binding.kind: %q, want \"environment\"", i, c.Binding.Kind)
		}
		if err := checkEnvName(c.Binding.Name); err != nil {
			return nil, bad("credentials[%d].binding.name: %v", i, err)
		}
		if c.Value == "" {
			return nil, bad("credentials[%d].value: empty", i)
		}
		switch c.Usage {
		case "opaque_http":
			if mc.Endpoint == nil || !strings.HasPrefix(strings.ToLower(mc.Endpoint.BaseURL), "https://") {
				if !loopbackHTTP(mc.Endpoint) {
					return nil, bad("endpoint.baseUrl: credential %s has usage opaque_http, which needs an https:// endpoint", c.Binding.Name)
				}
			}
		case "local_use":
		default:
			return nil, bad("credentials[%d].usage: %q is not one of opaque_http, local_use", i, c.Usage)
		}
		if _, dup := env[c.Binding.Name]; dup {
			return nil, bad("credentials[%d].binding.name: %s is set twice", i, c.Binding.Name)
		}
		env[c.Binding.Name] = c.Value
	}
	return env, nil
}

// loopbackHTTP lets a plain-http model server on loopback (Ollama, vLLM,
// a test's fake model) carry an opaque credential: nothing crosses a network.
func loopbackHTTP(ep *wire.Endpoint) bool {
	if ep == nil {
		return false
	}
	u, err := url.Parse(ep.BaseURL)
	if err != nil || u.Scheme != "http" {
		return false
	}
	h := u.Hostname()
	return h == "localhost" || h == "::1" || strings.HasPrefix(h, "127.")
}

// reservedEnv are variables a model connection may not set: they would
// redirect the harness or leak the runner's own settings.
var reservedEnv = map[string]bool{"PATH": true, "HOME": true, "LD_PRELOAD": true, "LD_LIBRARY_PATH": true}

func checkEnvName(k string) error {
	if k == "" {
		return fmt.Errorf("empty variable name")
	}
	for i, r := range k {
		if !(r == '_' || r >= 'A' && r <= 'Z' || r >= 'a' && r <= 'z' || i > 0 && r >= '0' && r <= '9') {
			return fmt.Errorf("%q is not a valid variable name", k)
		}
	}
	if reservedEnv[k] || strings.HasPrefix(k, "AGENTA_RUNNER_") || strings.HasPrefix(k, "DAYTONA_") || strings.HasPrefix(k, "RUNNER_") {
		return fmt.Errorf("%s is reserved and cannot be set by a model connection", k)
	}
	return nil
}
