package workspace_test

import (
	"bytes"
	"context"
	"encoding/json"
	"io"
	"strings"
	"testing"

	"github.com/agentrunner/runner/internal/workspace"
)

func stringsReader(s string) io.Reader { return strings.NewReader(s) }

func writeManifest(t *testing.T, s workspace.Store, m workspace.Manifest) {
	t.Helper()
	b, _ := json.Marshal(m)
	if err := s.Put(context.Background(), workspace.ManifestKey, bytes.NewReader(b), int64(len(b))); err != nil {
		t.Fatal(err)
	}
}
