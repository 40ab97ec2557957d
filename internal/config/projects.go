package config

import (
	"crypto/subtle"
	"fmt"
	"os"
	"strings"
)

// projectTokens parses AGENTA_RUNNER_PROJECT_TOKENS: project=token pairs
// separated by commas or newlines, or "@<path>" for a file holding them
// ('#' starts a comment line). A project token is accepted only for
// requests naming that project; the main token stays the operator's.
// Errors never quote a token.
func projectTokens(l *loader, main string) map[string]string {
	const key = "AGENTA_RUNNER_PROJECT_TOKENS"
	raw := l.get(key)
	if raw == "" {
		return nil
	}
	if path, ok := strings.CutPrefix(raw, "@"); ok {
		b, err := os.ReadFile(path)
		if err != nil {
			l.fail(fmt.Sprintf("%s: read the token file: %v", key, err))
			return nil
		}
		raw = string(b)
	}
	out := map[string]string{}
	n := 0
	for _, line := range strings.Split(raw, "\n") {
		if strings.HasPrefix(strings.TrimSpace(line), "#") {
			continue
		}
		for _, pair := range strings.Split(line, ",") {
			pair = strings.TrimSpace(pair)
			if pair == "" {
				continue
			}
			n++
			project, tok, ok := strings.Cut(pair, "=")
			project, tok = strings.TrimSpace(project), strings.TrimSpace(tok)
			switch {
			case !ok || project == "":
				l.fail(fmt.Sprintf("%s: entry %d is not project=token", key, n))
				continue
			case len(tok) < 16:
				l.fail(fmt.Sprintf("%s: the token of project %q is under 16 characters; generate one with `openssl rand -hex 32`", key, project))
				continue
			case out[project] != "":
				l.fail(fmt.Sprintf("%s: project %q is listed twice; give each project one token", key, project))
				continue
			case subtle.ConstantTimeCompare([]byte(tok), []byte(main)) == 1:
				l.fail(fmt.Sprintf("%s: the token of project %q is AGENTA_RUNNER_TOKEN, the operator's token for every project; give the project a token of its own", key, project))
				continue
			}
			for other, t := range out {
				if subtle.ConstantTimeCompare([]byte(tok), []byte(t)) == 1 {
					l.fail(fmt.Sprintf("%s: projects %q and %q share a token; give each its own", key, other, project))
				}
			}
			out[project] = tok
		}
	}
	return out
}
