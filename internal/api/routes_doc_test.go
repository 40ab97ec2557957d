package api_test

import (
	"os"
	"regexp"
	"slices"
	"strings"
	"testing"
)

var routeSpan = regexp.MustCompile("`(GET|POST|PUT|DELETE) (/[^`?]*)[^`]*`")

// readmeRoutes are the routes the README's route table documents, as
// ServeMux patterns ("GET /v1/sessions/{id}").
func readmeRoutes(t *testing.T) []string {
	t.Helper()
	data, err := os.ReadFile("../../README.md")
	if err != nil {
		t.Fatal(err)
	}
	_, table, ok := strings.Cut(string(data), "\n## Routes\n")
	if !ok {
		t.Fatal("README.md has no Routes section")
	}
	table, _, _ = strings.Cut(table, "\n## ")
	var out []string
	for _, line := range strings.Split(table, "\n") {
		cells := strings.Split(line, "|")
		if len(cells) < 3 {
			continue
		}
		for _, m := range routeSpan.FindAllStringSubmatch(cells[1], -1) {
			out = append(out, m[1]+" "+m[2])
		}
	}
	return out
}

// TestReadmeRoutesAreServed: every route the README documents is one the
// handler serves (without a token it answers 401, or the public routes
// their status, never 404 or 405), and every route the handler registers
// is documented.
func TestReadmeRoutesAreServed(t *testing.T) {
	documented := readmeRoutes(t)
	if len(documented) < 10 {
		t.Fatalf("read %d routes from the README: %q", len(documented), documented)
	}
	e := newEnv(t)
	params := strings.NewReplacer("{id}", "nope", "{interactionId}", "nope")
	for _, rt := range documented {
		method, path, _ := strings.Cut(rt, " ")
		if path == "/metrics" {
			continue // registered by cmd/runner (metrics.go), beside the handler
		}
		code, body := e.do(t, method, params.Replace(path), "", map[string]string{"Authorization": ""})
		if code == 404 || code == 405 {
			t.Errorf("README documents %s; the handler answers %d: %s", rt, code, body)
		}
	}

	src, err := os.ReadFile("api.go")
	if err != nil {
		t.Fatal(err)
	}
	registered := regexp.MustCompile(`mux\.Handle(?:Func)?\("([A-Z]+ /[^"]*)"`).FindAllStringSubmatch(string(src), -1)
	if len(registered) < 10 {
		t.Fatalf("found %d registered routes in api.go", len(registered))
	}
	for _, m := range registered {
		pattern := strings.ReplaceAll(m[1], "{iid}", "{interactionId}")
		if !slices.Contains(documented, pattern) {
			t.Errorf("the handler serves %s, which the README's route table lacks", m[1])
		}
	}
}
