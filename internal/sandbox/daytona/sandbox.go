package daytona

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"os"
	"path"
	"strings"
	"sync"
	"time"

	"github.com/agentrunner/runner/internal/logkey"
	"github.com/agentrunner/runner/internal/sandbox"
	"github.com/agentrunner/runner/internal/sandboxd"
	"github.com/agentrunner/runner/internal/sandboxd/client"
)

// Sandbox is a Daytona sandbox with a running daemon, which serves its
// processes, files, channels and trees (client.Remote).
type Sandbox struct {
	client.Remote
	p   *Provider
	id  string
	log *slog.Logger

	// mu guards gone.
	mu   sync.Mutex
	gone bool // destroyed
}

var (
	_ sandbox.Sandbox     = (*Sandbox)(nil)
	_ sandbox.Pauser      = (*Sandbox)(nil)
	_ sandbox.Prober      = (*Sandbox)(nil)
	_ sandbox.Channeler   = (*Sandbox)(nil)
	_ sandbox.FileTree    = (*Sandbox)(nil)
	_ sandbox.TreeWatcher = (*Sandbox)(nil)
)

// attach waits for sb to run, makes sure this version's daemon runs in
// it, and returns the Sandbox.
//
// fresh says no daemon can be running (the sandbox was just created or
// started), which saves probing for one.
func (p *Provider) attach(ctx context.Context, sb *apiSandbox, fresh bool, log *slog.Logger) (*Sandbox, error) {
	if sb.State != "started" {
		var err error
		if sb, err = p.settle(ctx, sb.ID); err != nil {
			return nil, err
		}
		if sb.State != "started" {
			return nil, stateErr(errors.New("did not start"), sb.ID, sb.State)
		}
	}
	id := sb.ID
	base, err := p.api.previewURL(ctx, id, p.cfg.DaemonPort, p.cfg.PreviewExpiry)
	if err != nil {
		return nil, stateErr(err, id, sb.State)
	}
	newClient := func(attempts int) *client.Client {
		return client.New(client.Config{
			BaseURL: base, Token: p.token(id), HTTPClient: p.daemon, Attempts: attempts,
			Refresh: func(ctx context.Context) (string, error) {
				return p.api.previewURL(ctx, id, p.cfg.DaemonPort, p.cfg.PreviewExpiry)
			},
			Sleep: p.api.sleep,
			Gone:  p.gone(id),
		})
	}
	var h sandboxd.Health
	healthy := false
	if !fresh {
		// A few tries, not one: a false "not running" restarts the daemon
		// and kills the harness in it, while a dead daemon is rare.
		h, err = newClient(3).Health(ctx)
		healthy = err == nil && h.Version == p.cfg.Version
		if err == nil && !healthy {
			log.Info("daemon runs another version", "version", h.Version, "want", p.cfg.Version)
		}
	}
	if !healthy {
		if err := p.boot(ctx, p.api.toolbox(sb), log); err != nil {
			return nil, stateErr(err, id, sb.State)
		}
		// The daemon listens already (--detach waits for it); the preview
		// proxy may take a moment to route to the new port.
		h, err = newClient(20).Health(ctx)
		if err != nil {
			return nil, stateErr(fmt.Errorf("daemon health: %w", err), id, sb.State)
		}
		if h.Version != p.cfg.Version {
			return nil, stateErr(fmt.Errorf("daemon reports version %q after starting %q", h.Version, p.cfg.Version), id, sb.State)
		}
	}
	s := &Sandbox{
		Remote: client.Remote{
			Daemon: newClient(0),
			Meta: sandbox.Info{
				ID: id, Provider: "daytona", Isolation: "daytona",
				Workdir: h.Workdir, Home: h.Home,
			},
			Socket: h.Socket,
			Runner: path.Join(h.Home, binRel(p.cfg.Version)),
		},
		p:   p,
		id:  id,
		log: log,
	}
	s.Destroyed = s.destroyed
	return s, nil
}

// missingBinary is the exit code of the start command when this
// version's binary is not in the sandbox yet.
const missingBinary = 111

// boot starts this version's daemon, uploading the binary first when the
// sandbox lacks it. The start is one synchronous toolbox call:
// `sandboxd --detach` exits once the daemon listens, replacing any earlier
// daemon; a sandbox that has the binary (a resumed one, or a snapshot that
// bakes it in) needs nothing else.
func (p *Provider) boot(ctx context.Context, tb *toolbox, log *slog.Logger) error {
	start := p.cfg.Clock.Now()
	// One file per version, so an upgrade never overwrites a binary that an
	// older daemon is running from. Version, token and port are checked to
	// hold no quote or space, which the toolbox's word splitting needs.
	rel := binRel(p.cfg.Version)
	//
	// Exit code 126 is retried: exec of a file that was just written fails
	// with ETXTBSY while any process forked in that moment still holds the
	// writer's descriptor (golang.org/issue/22315), and the toolbox forks.
	script := fmt.Sprintf("b=$HOME/%s; test -f $b || exit %d; chmod 755 $b || exit 1; "+
		"for i in 1 2 3 4 5; do %s=%s $b sandboxd --detach --listen 0.0.0.0:%d --runner-version %s; rc=$?; test $rc = 126 || exit $rc; sleep 0.2; done; exit 126",
		rel, missingBinary, sandboxd.TokenEnv, p.token(tb.id), p.cfg.DaemonPort, p.cfg.Version)
	// Single quotes: the toolbox splits words itself and runs no shell, and
	// should a toolbox ever wrap the command in one, nothing in the script
	// is expanded early either.
	command := `sh -c '` + script + `'`
	res, err := tb.execute(ctx, command, time.Minute)
	if err == nil && res.ExitCode == missingBinary {
		if err := p.upload(ctx, tb, rel, log); err != nil {
			return err
		}
		res, err = tb.execute(ctx, command, time.Minute)
		if err == nil && res.ExitCode == missingBinary {
			return fmt.Errorf("start daemon: the binary uploaded to the home directory is not under $HOME/%s; the toolbox's $HOME differs from its home directory", rel)
		}
	}
	if err != nil {
		return fmt.Errorf("start daemon: %w", err)
	}
	if res.ExitCode != 0 {
		// The result holds the daemon's log; the token is only in the command.
		return fmt.Errorf("start daemon: exit code %d: %s", res.ExitCode, strings.TrimSpace(res.Result))
	}
	log.Info("daemon started", logkey.Duration, p.cfg.Clock.Now().Sub(start).Milliseconds())
	return nil
}

// upload puts the daemon binary at rel under the sandbox user's home.
func (p *Provider) upload(ctx context.Context, tb *toolbox, rel string, log *slog.Logger) error {
	home, err := tb.homeDir(ctx)
	if err != nil {
		return err
	}
	data, err := os.ReadFile(p.cfg.DaemonBinary)
	if err != nil {
		return fmt.Errorf("read daemon binary: %w", err)
	}
	dst := path.Join(home, rel)
	if err := tb.upload(ctx, dst, data); err != nil {
		return err
	}
	log.Info("daemon uploaded", "path", dst, "bytes", len(data))
	return nil
}

func binRel(version string) string { return ".runner/bin/runner-" + version }

// Pause stops (parks) the sandbox; Open resumes it. Its processes end.
func (s *Sandbox) Pause(ctx context.Context) error {
	sb, err := s.p.settle(ctx, s.id)
	if err != nil {
		return err
	}
	if sb.State != "started" {
		return nil // stopped or archived already
	}
	if _, err := s.p.api.action(ctx, s.id, "stop"); err != nil {
		return stateErr(err, s.id, sb.State)
	}
	if sb, err = s.p.settle(ctx, s.id); err != nil {
		return err
	}
	if sb.State != "stopped" && sb.State != "archived" {
		return stateErr(errors.New("did not stop"), s.id, sb.State)
	}
	s.log.Info("sandbox paused")
	return nil
}

func (s *Sandbox) destroyed() bool {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.gone
}

// Destroy deletes the sandbox. It is idempotent; a sandbox already gone
// counts as destroyed.
func (s *Sandbox) Destroy(ctx context.Context) error {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.gone {
		return nil
	}
	ctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), 2*time.Minute)
	defer cancel()
	if err := s.p.remove(ctx, s.id); err != nil {
		return fmt.Errorf("daytona sandbox %s: %w", s.id, err)
	}
	s.gone = true
	s.log.Info("sandbox destroyed")
	return nil
}
