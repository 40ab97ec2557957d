package runner

import (
	"archive/tar"
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"log/slog"
	"path"
	"path/filepath"
	"strings"
	"sync"
	"time"

	"github.com/agentrunner/runner/internal/errdefs"
	"github.com/agentrunner/runner/internal/filetree"
	"github.com/agentrunner/runner/internal/logkey"
	"github.com/agentrunner/runner/internal/sandbox"
	"github.com/agentrunner/runner/internal/store"
	"github.com/agentrunner/runner/internal/workspace"
)

// The durable workspace hooks of the turn path: restore on acquire, a
// checkpoint every Config.CheckpointEvery during the turn and one at its
// end. A store that is required (configured, or signed by the platform)
// and fails makes the turn fail, naming the store; nothing is written
// into the void.

// AgentMountEnv tells the harness where the agent's shared folder is.
const AgentMountEnv = "AGENTA_AGENT_MOUNT_DIR"

// agentLink is the symlink in the working directory to the agent folder.
const agentLink = "agent-files"

// credentialFiles are never synced: harness logins stay on the runner.
var credentialFiles = []string{".credentials.json", "auth.json"}

// innerAgentDir is the agent folder inside a working directory that is
// $HOME.
const innerAgentDir = ".agenta-agent"

// homeState are entries of $HOME that belong to the sandbox's tools and
// harnesses (configuration written per turn, caches, the daemon), never
// to the working directory's sync when $HOME lies inside it.
var homeState = []string{".runner", ".runner-sandboxd", ".cache", ".npm", ".config", ".local", ".claude", ".claude.json", ".codex", ".pi", ".gemini"}

const defaultCheckpointEvery = 30 * time.Second

// finalCheckpointTimeout bounds the end-of-turn checkpoint, which runs
// even when the turn was cancelled.
const finalCheckpointTimeout = 5 * time.Minute

// durable is a live harness's synced trees.
type durable struct {
	tree     workspace.Tree
	agentDir string // empty without an agent folder

	// mu serialises syncs and guards the following.
	mu      sync.Mutex
	mounts  []workspace.Mount
	bases   []workspace.Manifest // what each mount's tree last matched
	keepers []*workspace.Keeper
	fuse    workspace.MountPoint // the mounted working directory (fuse mode); nil in sync mode
	// watches follow the mounts' trees where the provider can (nil
	// otherwise): a checkpoint then reads only the directories changed.
	watches []sandbox.TreeWatch
	// record is the working directory the transcript is kept under,
	// to be written by the next checkpoint when dirty (durable_rekey.go).
	record      workdirRecord
	recordDirty bool
}

// treeOf is what mount i is scanned through.
func (d *durable) treeOf(i int) workspace.Tree {
	if d.watches[i] == nil {
		return d.tree
	}
	return workspace.Watched(d.tree, d.mounts[i].Root, d.watches[i])
}

// release stops following the trees and unmounts the working directory
// (the sandbox is released): the durable workspace stage's undo.
func (d *durable) release(ctx context.Context, log *slog.Logger, sandboxID string) {
	d.close()
	d.unmount(ctx, log, sandboxID) // durable_fuse.go
}

// close stops following the trees.
func (d *durable) close() {
	d.mu.Lock()
	defer d.mu.Unlock()
	for i, w := range d.watches {
		if w != nil {
			_ = w.Close()
			d.watches[i] = nil
		}
	}
}

func (t *turn) workspaceTarget() workspace.Target {
	r := t.plan.req
	return workspace.Target{ProjectID: projectOf(r), SessionID: r.SessionID, AgentID: workspace.AgentID(r), Request: r}
}

// acquireWorkspace restores the session's durable files into a new
// sandbox (cold turns), before anything else is written there.
func (c *coldStart) acquireWorkspace(ctx context.Context, lv *live) (undo, error) {
	t := c.t
	res := t.svc.cfg.Workspaces
	if res == nil || t.key.SessionID == "" || t.svc.cfg.Workdir != "" {
		// A person's own directory (runner run -workdir) is its own
		// durable state: never restored over, linked into or synced.
		return nil, nil
	}
	stores, ok, err := res.Resolve(ctx, t.workspaceTarget())
	if err != nil {
		return nil, fmt.Errorf("durable workspace: %w", err)
	}
	if !ok {
		return nil, nil
	}
	ft, isTree := lv.sb.(sandbox.FileTree)
	if !isTree {
		return nil, errdefs.Unprocessablef("durable workspace: provider %s cannot transfer files in bulk; set AGENTA_RUNNER_STORE_URL=off or use another provider", lv.provider)
	}
	info := lv.sb.Info()
	d := &durable{tree: ft}
	u := func(ctx context.Context, _ string) { d.release(ctx, t.svc.log, info.ID) }
	d.set(t, stores)
	d.plan(t, info, stores)
	if t.svc.cfg.Mounter != nil { // durable_fuse.go
		if err := d.mountWorkdir(ctx, t, info, stores); err != nil {
			return u, err
		}
	}
	start := time.Now()
	if err := d.restore(ctx, t, lv.sb, info); err != nil {
		return u, err
	}
	t.log.Debug("timing", logkey.Stage, "workspace_restore", logkey.Duration, time.Since(start).Milliseconds())
	lv.durable = d
	return u, nil
}

// plan lays out d's mounts in the sandbox described by info: the
// working directory, the harness's transcript directories and the agent
// folder.
func (d *durable) plan(t *turn, info sandbox.Info, stores workspace.Stores) {
	exclude := append([]string{"/" + agentLink}, credentialFiles...)
	agentDir := sandbox.AgentDir(info)
	if rel, err := filepath.Rel(info.Workdir, info.Home); err == nil && !strings.HasPrefix(rel, "..") {
		// Beside a working directory that is $HOME (/home/user-agent) the
		// sandbox user may not create anything: the folder goes inside.
		agentDir = path.Join(info.Workdir, innerAgentDir)
		exclude = append(exclude, "/"+innerAgentDir)
		// $HOME inside the working directory (a remote sandbox whose work
		// dir is its home): the daemon's, tools' and harnesses' own state
		// is not the user's work, and the transcript is its own mount.
		for _, name := range append(homeState, t.plan.harness.spec.StateDirs...) {
			exclude = append(exclude, "/"+path.Join(filepath.ToSlash(rel), name))
		}
	}
	d.mounts = []workspace.Mount{
		{Name: "workspace", Store: stores.Session, Root: info.Workdir, Exclude: exclude},
	}
	if dirs := t.plan.harness.spec.StateDirs; len(dirs) > 0 {
		d.mounts = append(d.mounts, workspace.Mount{Name: "transcript", Store: workspace.Prefixed(stores.Session, workspace.MetaDir+"/home"), Root: info.Home,
			Include: dirs, Exclude: append([]string{"*.sqlite", "*.sqlite-*", "*.db", "*.db-*"}, credentialFiles...)})
	}
	if stores.Agent != nil {
		d.agentDir = agentDir
		d.mounts = append(d.mounts, workspace.Mount{Name: "agent", Store: stores.Agent, Root: d.agentDir, Exclude: credentialFiles})
	}
}

// restore follows d's mounts where sb can and restores each from its
// store, then links the agent folder into the working directory.
func (d *durable) restore(ctx context.Context, t *turn, sb sandbox.Sandbox, info sandbox.Info) error {
	d.bases = make([]workspace.Manifest, len(d.mounts))
	d.watches = make([]sandbox.TreeWatch, len(d.mounts))
	if tw, ok := sb.(sandbox.TreeWatcher); ok {
		for i, m := range d.mounts {
			if len(m.Include) > 0 {
				continue // a few harness directories: a full scan is cheap
			}
			w, werr := tw.WatchTree(m.Root, m.ScanOptions(workspace.Manifest{}))
			if werr != nil {
				t.log.Debug("workspace watch unavailable: checkpoints scan the whole tree", "mount", m.Name, logkey.Error, werr)
				continue
			}
			d.watches[i] = w
		}
	}
	for i, m := range d.mounts {
		man, st, err := workspace.Restore(ctx, d.treeOf(i), m)
		if err != nil {
			return fmt.Errorf("durable workspace: restore %s: %w", m.Name, err)
		}
		d.bases[i] = man
		if m.Name == "transcript" {
			if err := d.rekeyTranscript(ctx, t, i, t.plan.harness.spec.KeyedDirs, info.Workdir); err != nil {
				return fmt.Errorf("durable workspace: %w", err)
			}
		}
		if m.Name == "workspace" {
			if err := refuseFuseWritten(ctx, t, m.Store, man); err != nil {
				return err
			}
		}
		t.log.Debug("workspace restored", "mount", m.Name, "entries", st.Entries, "copied", st.Transferred, "bytes", st.Bytes, "removed", st.Deleted)
	}
	if d.agentDir != "" && d.fuse == nil { // a mount cannot hold the symlink
		if err := linkAgentFolder(ctx, d.tree, info.Workdir, d.agentDir); err != nil {
			return fmt.Errorf("durable workspace: %w", err)
		}
	}
	return nil
}

// set installs a turn's stores (a warm turn brings its own signer) and
// tells their leases the turn's deadline.
func (d *durable) set(t *turn, s workspace.Stores) {
	if len(d.mounts) > 0 {
		for i := range d.mounts {
			switch d.mounts[i].Name {
			case "workspace":
				d.mounts[i].Store = s.Session
			case "transcript":
				d.mounts[i].Store = workspace.Prefixed(s.Session, workspace.MetaDir+"/home")
			case "agent":
				if s.Agent != nil {
					d.mounts[i].Store = s.Agent
				}
			}
		}
	}
	d.keepers = s.Keepers
	if d.fuse != nil {
		if err := d.fuse.SetStore(s.Session); err != nil {
			t.log.Warn("fuse mount keeps its previous store credential", logkey.Error, err)
		}
	}
	if total := t.svc.cfg.Limits.Total; total > 0 {
		for _, k := range d.keepers {
			k.SetHorizon(time.Now().Add(total + time.Minute))
		}
	}
}

// linkAgentFolder (re)creates <cwd>/agent-files → the agent folder: object
// storage keeps no symlinks, and whatever stands there is replaced.
func linkAgentFolder(ctx context.Context, ft workspace.Tree, workdir, agentDir string) error {
	if rel, err := filepath.Rel(workdir, agentDir); err == nil && !strings.HasPrefix(rel, "..") {
		// Inside the workdir: make sure it exists, also for an agent whose
		// folder is still empty (a sibling folder is the provider's).
		if err := importOne(ctx, ft, workdir, filetree.Entry{Path: filepath.ToSlash(rel), Kind: filetree.Dir, Mode: 0o755}); err != nil {
			return err
		}
	}
	ent := filetree.Entry{Path: agentLink, Kind: filetree.Symlink, Mode: 0o777, Target: agentDir}
	have, err := ft.Scan(ctx, workdir, filetree.ScanOptions{Include: []string{agentLink}})
	if err == nil && len(have.Entries) == 1 && have.Entries[0].Kind == filetree.Symlink && have.Entries[0].Target == agentDir {
		return nil
	}
	return importOne(ctx, ft, workdir, ent)
}

// transcriptRestored reports whether the harness's own transcript came
// back from the store into this sandbox, so the session can be reloaded
// natively even though the sandbox is new.
func (lv *live) transcriptRestored() bool {
	if lv.durable == nil {
		return false
	}
	lv.durable.mu.Lock()
	defer lv.durable.mu.Unlock()
	for i, m := range lv.durable.mounts {
		if m.Name == "transcript" && len(lv.durable.bases[i].Entries) > 0 {
			return true
		}
	}
	return false
}

// workspaceEnv is what the harness is told about the durable folders.
func (lv *live) workspaceEnv() []string {
	if lv.durable == nil || lv.durable.agentDir == "" {
		return nil
	}
	return []string{AgentMountEnv + "=" + lv.durable.agentDir}
}

// workspaceGuidance is the line that tells the model where durable
// files go.
func (lv *live) workspaceGuidance() (json.RawMessage, bool) {
	if lv.durable == nil || lv.durable.agentDir == "" {
		return nil, false
	}
	if lv.durable.fuse != nil {
		return textBlock(fmt.Sprintf("[runner] Files in this working directory persist across turns of this session (symlinks cannot be created in it); files in %s persist across every session of this agent.\n\n", lv.durable.agentDir)), true
	}
	return textBlock(fmt.Sprintf("[runner] Files in this working directory persist across turns of this session; files in ./%s (%s) persist across every session of this agent.\n\n", agentLink, lv.durable.agentDir)), true
}

// removeWorkspace deletes a deleted session's durable files from the
// runner's own store (the manifest first, so a partial delete never leaves
// a manifest naming missing files). The agent folder is shared and stays.
func (s *Service) removeWorkspace(ctx context.Context, sess store.Session) error {
	if s.cfg.Workspaces == nil {
		return nil
	}
	stores, ok, err := s.cfg.Workspaces.Resolve(ctx, workspace.Target{ProjectID: sess.ProjectID, SessionID: sess.ID})
	if err != nil || !ok {
		return err
	}
	keys, err := stores.Session.List(ctx, "")
	if err != nil {
		return err
	}
	if err := stores.Session.Delete(ctx, workspace.ManifestKey); err != nil {
		return err
	}
	for _, k := range keys {
		if k == workspace.ManifestKey {
			continue // deleted first
		}
		if err := stores.Session.Delete(ctx, k); err != nil {
			return err
		}
	}
	return nil
}

// importOne writes one directory or symlink entry into a sandbox's tree.
func importOne(ctx context.Context, ft workspace.Tree, root string, e filetree.Entry) error {
	var buf bytes.Buffer
	tw := tar.NewWriter(&buf)
	if err := tw.WriteHeader(filetree.Header(e)); err != nil {
		return err
	}
	if err := tw.Close(); err != nil {
		return err
	}
	return ft.Import(ctx, root, &buf)
}
