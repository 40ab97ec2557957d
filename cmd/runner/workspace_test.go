package main

import (
	"strings"
	"testing"

	"github.com/agentrunner/runner/internal/config"
)

func TestStoreURL(t *testing.T) {
	dir := t.TempDir()
	for _, tc := range []struct {
		url     string
		off     bool
		wantErr string
	}{
		{url: ""},
		{url: "off", off: true},
		{url: dir + "/ws"},
		{url: "file://" + dir + "/ws2"},
		{url: "s3://key:secret@127.0.0.1:8333/bucket/prefix?region=eu-west-1&insecure=1&sts=1&duration=900"},
		{url: "s3://127.0.0.1:8333/bucket", wantErr: "access key"},
		{url: "s3://k:s@/bucket", wantErr: "no host"},
		{url: "s3://k:s@host", wantErr: "no bucket"},
		{url: "s3://k:supersecret@host/b?color=red", wantErr: `unknown parameter "color"`},
		{url: "s3://k:s@host/b?duration=60", wantErr: "needs sts=1"},
		{url: "s3://k:s@host/b?sts=1&duration=soon", wantErr: "want seconds"},
		{url: "s3://k:s@host/b?insecure=maybe", wantErr: "use 1 or 0"},
		{url: "ftp://host/x", wantErr: `scheme "ftp"`},
		{url: "file://relative/x", wantErr: "absolute path"},
	} {
		r, err := workspaceResolver(config.Config{Workspace: config.Workspace{StoreURL: tc.url}, DataDir: dir})
		switch {
		case tc.wantErr != "":
			if err == nil || !strings.Contains(err.Error(), tc.wantErr) {
				t.Errorf("%q: %v, want an error containing %q", tc.url, err, tc.wantErr)
			}
			if err != nil && strings.Contains(err.Error(), "supersecret") {
				t.Errorf("%q: the error shows the secret: %v", tc.url, err)
			}
		case err != nil:
			t.Errorf("%q: %v", tc.url, err)
		case (r == nil) != tc.off:
			t.Errorf("%q: resolver %v, off %v", tc.url, r, tc.off)
		}
	}
}
