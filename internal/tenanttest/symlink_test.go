package tenanttest

import (
	"bytes"
	"io/fs"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/agentrunner/runner/internal/platform/platformtest"
)

// victimContent is what the host files the attacks aim at hold; a test
// searches for it where it must not have been copied.
const victimContent = "host file 7d41c0 outside every sandbox"

// hostVictim is a host file outside the runner's data dir, and the
// directory holding it.
func hostVictim(t *testing.T) (file, dir string) {
	t.Helper()
	dir = t.TempDir()
	file = filepath.Join(dir, "victim")
	if err := os.WriteFile(file, []byte(victimContent), 0o600); err != nil {
		t.Fatal(err)
	}
	return file, dir
}

// victimUntouched fails the test when the victim's directory holds
// anything but the victim, or the victim another content.
func victimUntouched(t *testing.T, r *runner, file string) {
	t.Helper()
	if b, err := os.ReadFile(file); err != nil || string(b) != victimContent {
		t.Errorf("host file %s = %q, %v; the runner wrote through a planted link\n%s", file, b, err, r.Log())
	}
	ents, err := os.ReadDir(filepath.Dir(file))
	if err != nil || len(ents) != 1 {
		t.Errorf("host dir %s holds %v, %v; want the victim alone\n%s", filepath.Dir(file), ents, err, r.Log())
	}
}

// plantLinks runs one turn whose shell command (the agent's) plants links
// in its workspace.
func plantLinks(t *testing.T, r *runner, command string, fields map[string]any) {
	t.Helper()
	tr := r.stream(t, fake(command+" && echo planted", fields))
	if !tr.Result.OK || !strings.Contains(tr.Text(), "planted") {
		t.Fatalf("planting turn: %+v %q\n%s", tr.Result, tr.Text(), r.Log())
	}
}

// sandboxUIDs are the runner configurations the write attacks run
// against: sandboxes as the runner's uid, and as an unprivileged user
// (the runner still writes as itself, so that must not help).
func sandboxUIDs(t *testing.T) map[string][]string {
	cases := map[string][]string{"runner-uid": nil}
	if os.Geteuid() == 0 {
		cases["sandbox-uid-65534"] = []string{"AGENTA_RUNNER_LOCAL_SANDBOX_UID=65534"}
	} else {
		t.Log("not root: AGENTA_RUNNER_LOCAL_SANDBOX_UID needs a root runner; that case is skipped")
	}
	return cases
}

// TestAttackAgentsMdLink: the agent replaces AGENTS.md in its workspace
// with a link to a host file; a changed agentsMd on the next turn makes
// the runner start the harness cold and write AGENTS.md again, on the
// host, as itself. What must hold: the host file is untouched, and the
// turn runs with a regular AGENTS.md holding the new instructions (the
// runner owns that file, so the link is replaced, not followed).
func TestAttackAgentsMdLink(t *testing.T) {
	needBwrap(t)
	for name, env := range sandboxUIDs(t) {
		t.Run(name, func(t *testing.T) {
			victim, _ := hostVictim(t)
			r := start(t, env...)
			fields := map[string]any{"sessionId": "agentsmd-link", "agentsMd": "first instructions"}
			plantLinks(t, r, "exec ln -sf "+victim+" AGENTS.md", fields)
			fields["agentsMd"] = "second instructions"
			tr := r.stream(t, fake("exec cat AGENTS.md; test -L AGENTS.md && echo STILL-A-LINK", fields))
			victimUntouched(t, r, victim)
			if !tr.Result.OK {
				t.Fatalf("cold turn after the link: %+v\n%s", tr.Result, r.Log())
			}
			if text := tr.Text(); !strings.Contains(text, "second instructions") || strings.Contains(text, "STILL-A-LINK") {
				t.Fatalf("AGENTS.md in the workspace: %q; want a regular file with the new instructions", text)
			}
		})
	}
}

// TestAttackHarnessFilesLinkedDir: the agent makes a directory on a
// harnessFiles path a link to a host directory; the next turn's
// harnessFiles are written below it on a cold start. What must hold:
// nothing is created or changed in the host directory, and the turn fails
// with an error naming the linked path (a link among the parents is
// refused: the runner does not own that directory).
func TestAttackHarnessFilesLinkedDir(t *testing.T) {
	needBwrap(t)
	for name, env := range sandboxUIDs(t) {
		t.Run(name, func(t *testing.T) {
			victim, dir := hostVictim(t)
			r := start(t, env...)
			fields := map[string]any{"sessionId": "harnessfiles-link"}
			plantLinks(t, r, "exec ln -s "+dir+" conf", fields)
			fields["harnessFiles"] = []any{
				map[string]any{"path": "conf/victim", "content": "written by the runner"},
				map[string]any{"path": "conf/new.json", "content": "written by the runner"},
			}
			tr := r.stream(t, fake("say unreachable", fields))
			victimUntouched(t, r, victim)
			if tr.Result.OK || !strings.Contains(tr.Result.Error, "conf") {
				t.Fatalf("turn writing through the linked directory: ok=%v error %q; want a failure naming conf\n%s", tr.Result.OK, tr.Result.Error, r.Log())
			}
		})
	}
}

// TestAttackWorkspaceLinksCheckpointRestore: the agent leaves links in its
// durable workspace, to a host file, a host directory and a file of its
// own; the turn's checkpoint stores the workspace, and a later turn on a
// fresh sandbox (its state dir gone, as on another host) restores it and
// writes agentsMd into it. What must hold: the links travel as links (the
// in-workspace one still works), nothing outside is written, and the
// host file's content is copied nowhere under the data dir.
func TestAttackWorkspaceLinksCheckpointRestore(t *testing.T) {
	needBwrap(t)
	victim, dir := hostVictim(t)
	// No disk quota: the data dir is searched for the victim's content
	// below, and a quota's sparse image would be read whole (4 GiB).
	r := start(t, "AGENTA_RUNNER_LOCAL_DISK_MB=0")
	fields := map[string]any{"sessionId": "restore-links", "agentsMd": "first"}
	plantLinks(t, r, "exec mkdir -p src && echo mine > src/own && ln -s src/own inlink && ln -s "+victim+" outfile && ln -s "+dir+" outdir", fields)
	r.stop(t)
	// A fresh sandbox: what the workspace holds comes back from the store.
	if err := os.RemoveAll(filepath.Join(r.DataDir, "sandboxes", "state")); err != nil {
		t.Fatal(err)
	}
	r.run(t)
	fields["agentsMd"] = "second"
	tr := r.stream(t, fake("exec readlink outfile outdir inlink; cat inlink AGENTS.md", fields))
	if !tr.Result.OK {
		t.Fatalf("restored turn: %+v\n%s", tr.Result, r.Log())
	}
	if text := tr.Text(); !strings.Contains(text, victim+"\n"+dir+"\nsrc/own\nmine\nsecond") {
		t.Fatalf("restored workspace: %q; want the three links as they were, and AGENTS.md", text)
	}
	victimUntouched(t, r, victim)
	err := filepath.WalkDir(r.DataDir, func(p string, d fs.DirEntry, err error) error {
		if err != nil || !d.Type().IsRegular() {
			return err
		}
		if b, rerr := os.ReadFile(p); rerr == nil && bytes.Contains(b, []byte(victimContent)) {
			t.Errorf("the host file's content was copied to %s", p)
		}
		return nil
	})
	if err != nil {
		t.Fatal(err)
	}
}

// TestAttackAttachmentLink: the uploader of an attachment picks its name
// and bytes, and the runner writes it to attachments/<name> in the
// workspace on the host. The agent first links that file to a host file,
// or the attachments directory to a host directory. What must hold: the
// host file and directory are untouched; a link at the file is replaced
// by the attachment (the turn works), a linked directory fails the turn
// naming it.
func TestAttackAttachmentLink(t *testing.T) {
	needBwrap(t)
	const cred = "Secret tenanttest-run-credential"
	f := platformtest.New(t, cred)
	f.AddAttachment("att-1", platformtest.Attachment{Filename: "notes.txt", MediaType: "text/plain", Data: []byte("uploaded bytes")})
	r := start(t)
	turnWith := func(session string, content any) turn {
		return r.stream(t, map[string]any{
			"harness": "fake", "sessionId": session,
			"messages": []any{map[string]any{"role": "user", "content": content}},
			"telemetry": map[string]any{"exporters": map[string]any{"otlp": map[string]any{
				"endpoint": f.URL + "/otlp/v1/traces", "headers": map[string]string{"authorization": cred}}}},
			"runContext": map[string]any{"workflow": map[string]any{"artifact": map[string]any{"id": "wf-1", "slug": "agent"}}},
		})
	}
	withAttachment := []any{
		map[string]any{"type": "attachment", "attachmentId": "att-1", "filename": "notes.txt", "mimeType": "text/plain", "size": 14},
		map[string]any{"type": "text", "text": "exec cat attachments/notes.txt; test -L attachments/notes.txt && echo STILL-A-LINK\n"},
	}

	victim, dir := hostVictim(t)
	if tr := turnWith("att-file-link", "exec mkdir attachments && ln -s "+victim+" attachments/notes.txt && echo planted"); !tr.Result.OK || !strings.Contains(tr.Text(), "planted") {
		t.Fatalf("planting turn: %+v %q\n%s", tr.Result, tr.Text(), r.Log())
	}
	tr := turnWith("att-file-link", withAttachment)
	victimUntouched(t, r, victim)
	if !tr.Result.OK || !strings.Contains(tr.Text(), "uploaded bytes") || strings.Contains(tr.Text(), "STILL-A-LINK") {
		t.Fatalf("attachment over a linked file: ok=%v %q %q; want the attachment as a regular file\n%s", tr.Result.OK, tr.Text(), tr.Result.Error, r.Log())
	}

	victim, dir = hostVictim(t)
	if tr := turnWith("att-dir-link", "exec ln -s "+dir+" attachments && echo planted"); !tr.Result.OK || !strings.Contains(tr.Text(), "planted") {
		t.Fatalf("planting turn: %+v %q\n%s", tr.Result, tr.Text(), r.Log())
	}
	tr = turnWith("att-dir-link", withAttachment)
	victimUntouched(t, r, victim)
	if tr.Result.OK || !strings.Contains(tr.Result.Error, "attachments") {
		t.Fatalf("attachment into a linked directory: ok=%v error %q; want a failure naming attachments\n%s", tr.Result.OK, tr.Result.Error, r.Log())
	}
}
