package daytona

import (
	"context"
	"crypto/hmac"
	"crypto/rand"
	"crypto/sha256"
	"debug/elf"
	"encoding/hex"
	"errors"
	"fmt"
	"log/slog"
	"net/http"
	"net/http/cookiejar"
	"regexp"
	"strings"
	"time"

	"github.com/agentrunner/runner/internal/errdefs"
	"github.com/agentrunner/runner/internal/logkey"
	"github.com/agentrunner/runner/internal/sandbox"
)

// sdkVersion is the Daytona SDK version we speak (docs/protocols.md, Daytona).
const sdkVersion = "0.190.0"

// Labels the provider puts on every sandbox.
const (
	LabelRunner  = "runner.id"
	LabelSession = "runner.session"
	LabelProject = "runner.project"
	// labelCreate makes a create retry-safe: after an ambiguous failure the
	// provider looks for a sandbox carrying its create id before trying again.
	labelCreate = "runner.create"
)

// Clock is the time source of waits and backoff; tests inject one whose
// After fires at once.
type Clock interface {
	Now() time.Time
	After(d time.Duration) <-chan time.Time
}

type realClock struct{}

func (realClock) Now() time.Time                         { return time.Now() }
func (realClock) After(d time.Duration) <-chan time.Time { return time.After(d) }

// Config configures the provider. Zero values take the documented defaults.
type Config struct {
	APIKey string // required
	APIURL string // default https://app.daytona.io/api
	Target string // region; default the organisation's
	// Snapshot or Image (not both) is what sandboxes are made from;
	// neither means Daytona's default snapshot.
	Snapshot string
	Image    string
	// AutoStopMinutes stops an idle sandbox (default 15; negative disables).
	AutoStopMinutes int
	// AutoDeleteMinutes deletes a stopped sandbox (default 30; negative
	// disables). Zero is the default, not Daytona's "delete on stop".
	AutoDeleteMinutes int
	// DaemonBinary is the path of the runner binary uploaded into
	// sandboxes and run as `<binary> sandboxd` (static, linux/amd64).
	DaemonBinary string // required
	// Version is the runner version, of letters, digits and ._+- only (it
	// names a file and goes into a command line); a sandbox whose daemon
	// runs another version gets this binary uploaded and its daemon restarted.
	Version string // required
	// RunnerID labels sandboxes with the runner that made them.
	RunnerID string
	// DaemonPort is the port the daemon listens on inside the sandbox
	// (default 2468).
	DaemonPort int
	// TokenKey keys the per-sandbox daemon tokens (HMAC of the sandbox id),
	// so a restarted runner can reach a daemon it started; default the API key.
	TokenKey []byte
	// StartTimeout bounds waiting for a sandbox to leave a transitional
	// state (creating, starting, stopping …); default 3 min.
	StartTimeout time.Duration
	// PreviewExpiry is the lifetime of signed preview URLs (default 24 h);
	// an expired one is fetched again.
	PreviewExpiry time.Duration
	// HTTPClient must have no Timeout (daemon streams are long); a cookie
	// jar is added for the preview proxy when it has none.
	HTTPClient *http.Client
	Clock      Clock
}

// Provider creates and reopens Daytona sandboxes.
type Provider struct {
	cfg    Config
	api    *api
	daemon *http.Client // for the preview proxy: with a cookie jar
	log    *slog.Logger
}

var (
	_ sandbox.Provider     = (*Provider)(nil)
	_ sandbox.Opener       = (*Provider)(nil)
	_ sandbox.Describer    = (*Provider)(nil)
	_ sandbox.Remover      = (*Provider)(nil)
	_ sandbox.Lister       = (*Provider)(nil)
	_ sandbox.HarnessImage = (*Provider)(nil)
)

// New returns a provider for cfg. It checks the configuration and that the
// daemon binary is readable; it makes no API call.
func New(cfg Config, logger *slog.Logger) (*Provider, error) {
	if logger == nil {
		logger = slog.New(slog.DiscardHandler)
	}
	var errs []error
	if cfg.APIKey == "" {
		errs = append(errs, errdefs.Invalidf("daytona: an API key is required (DAYTONA_API_KEY)"))
	}
	if cfg.Snapshot != "" && cfg.Image != "" {
		errs = append(errs, errdefs.Invalidf("daytona: set a snapshot or an image, not both"))
	}
	if !safeVersion.MatchString(cfg.Version) {
		errs = append(errs, errdefs.Invalidf("daytona: the runner version %q must be non-empty and of letters, digits and ._+-", cfg.Version))
	}
	if cfg.DaemonBinary == "" {
		errs = append(errs, errdefs.Invalidf("daytona: the daemon binary path is required"))
	} else if err := checkBinary(cfg.DaemonBinary, logger); err != nil {
		errs = append(errs, err)
	}
	if err := errors.Join(errs...); err != nil {
		return nil, err
	}
	if cfg.APIURL == "" {
		cfg.APIURL = "https://app.daytona.io/api"
	}
	cfg.APIURL = strings.TrimSuffix(cfg.APIURL, "/")
	if cfg.AutoStopMinutes == 0 {
		cfg.AutoStopMinutes = 15
	}
	if cfg.AutoDeleteMinutes == 0 {
		cfg.AutoDeleteMinutes = 30
	}
	if cfg.DaemonPort == 0 {
		cfg.DaemonPort = 2468
	}
	if len(cfg.TokenKey) == 0 {
		cfg.TokenKey = []byte(cfg.APIKey)
	}
	if cfg.StartTimeout <= 0 {
		cfg.StartTimeout = 3 * time.Minute
	}
	if cfg.PreviewExpiry <= 0 {
		cfg.PreviewExpiry = 24 * time.Hour
	}
	if cfg.Clock == nil {
		cfg.Clock = realClock{}
	}
	if cfg.HTTPClient == nil {
		cfg.HTTPClient = &http.Client{}
	}
	daemon := *cfg.HTTPClient
	if daemon.Jar == nil {
		// Daytona's preview proxy sets a daytona-sandbox-auth-* cookie on the
		// first answer and refuses later requests without it.
		daemon.Jar, _ = cookiejar.New(nil)
	}
	return &Provider{
		cfg:    cfg,
		api:    &api{base: cfg.APIURL, key: cfg.APIKey, hc: cfg.HTTPClient, clock: cfg.Clock, log: logger, attempts: 6},
		daemon: &daemon,
		log:    logger.With(logkey.Provider, "daytona"),
	}, nil
}

// Name is "daytona".
func (p *Provider) Name() string { return "daytona" }

// HarnessPrefix is where the snapshot (`runner daytona snapshot build`)
// installed the harnesses.
func (p *Provider) HarnessPrefix() string { return HarnessPrefix }

// Describe reports what the provider enforces.
func (p *Provider) Describe() map[string]any {
	d := map[string]any{
		"isolation":  "daytona",
		"network":    []string{"on", "off", "allowlist"},
		"pause":      true,
		"api_url":    p.cfg.APIURL,
		"autostop":   p.cfg.AutoStopMinutes,
		"autodelete": p.cfg.AutoDeleteMinutes,
	}
	if p.cfg.Target != "" {
		d["target"] = p.cfg.Target
	}
	if p.cfg.Snapshot != "" {
		d["snapshot"] = p.cfg.Snapshot
	}
	if p.cfg.Image != "" {
		d["image"] = p.cfg.Image
	}
	return d
}

// token is the daemon token of sandbox id. Deriving it keeps no state
// that a runner restart could lose; whoever holds the key holds the API
// key too, and with it a shell in the sandbox anyway.
func (p *Provider) token(id string) string {
	m := hmac.New(sha256.New, p.cfg.TokenKey)
	m.Write([]byte("runner-sandboxd:" + id))
	return hex.EncodeToString(m.Sum(nil))
}

func checkSpec(spec sandbox.Spec) error {
	if len(spec.Binds) > 0 {
		return errdefs.Unprocessablef("daytona sandboxes cannot see host paths (binds %q); the runner binary is already inside as the daemon", spec.Binds[0].Path)
	}
	if spec.ReadOnly {
		return errdefs.Unprocessablef("daytona sandboxes cannot make the workspace read-only")
	}
	return nil
}

// Create makes a sandbox for spec and returns once its daemon answers.
// A sandbox that fails on the way is deleted.
func (p *Provider) Create(ctx context.Context, spec sandbox.Spec) (sandbox.Sandbox, error) {
	if err := checkSpec(spec); err != nil {
		return nil, err
	}
	pol, err := policyFor(spec.Network)
	if err != nil {
		return nil, err
	}
	req := createRequest{
		Snapshot: p.cfg.Snapshot,
		Target:   p.cfg.Target,
		Labels:   map[string]string{},
		// Daytona: autostop 0 disables; autodelete negative disables, 0
		// deletes on stop, which would make parking destroy the sandbox.
		AutoStopInterval:   max(p.cfg.AutoStopMinutes, 0),
		AutoDeleteInterval: p.cfg.AutoDeleteMinutes,
	}
	if req.AutoDeleteInterval < 0 {
		req.AutoDeleteInterval = -1
	}
	if p.cfg.Image != "" {
		req.BuildInfo = &buildInfo{DockerfileContent: "FROM " + p.cfg.Image + "\n", ContextHashes: []string{}}
	}
	for k, v := range spec.Labels {
		req.Labels[k] = v
	}
	if p.cfg.RunnerID != "" {
		req.Labels[LabelRunner] = p.cfg.RunnerID
	}
	if spec.SessionID != "" {
		req.Labels[LabelSession] = spec.SessionID
	}
	if spec.ProjectID != "" {
		req.Labels[LabelProject] = spec.ProjectID
	}
	var nonce [12]byte
	_, _ = rand.Read(nonce[:])
	req.Labels[labelCreate] = hex.EncodeToString(nonce[:])
	pol.apply(&req)

	start := p.cfg.Clock.Now()
	sb, err := p.createOnce(ctx, req)
	if err != nil {
		return nil, err
	}
	log := p.log.With(logkey.Sandbox, sb.ID, logkey.Session, spec.SessionID)
	s, err := p.attach(ctx, sb, true, log)
	if err != nil {
		// Nothing may leak: the caller never learns this id.
		dctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), time.Minute)
		defer cancel()
		if derr := p.remove(dctx, sb.ID); derr != nil {
			log.Error("delete failed sandbox", logkey.Error, derr)
		}
		return nil, err
	}
	log.Info("sandbox created", logkey.Duration, p.cfg.Clock.Now().Sub(start).Milliseconds(), "network", pol.String())
	return s, nil
}

// createOnce sends the create. 429 and 503 mean Daytona refused it before
// acting, and api.do already retried those. A transport error, 502 or 504
// is ambiguous (the sandbox may exist): before sending the create again,
// it looks the sandbox up by its create label, so a retry never makes a
// second sandbox.
func (p *Provider) createOnce(ctx context.Context, req createRequest) (*apiSandbox, error) {
	var last error
	for attempt := range 4 {
		if attempt > 0 {
			if err := p.api.sleep(ctx, backoff(attempt)); err != nil {
				return nil, errors.Join(err, last)
			}
			found, err := p.api.findByLabel(ctx, labelCreate, req.Labels[labelCreate])
			if err != nil {
				return nil, errors.Join(last, err)
			}
			if len(found) > 0 {
				return &found[0], nil
			}
		}
		sb, err := p.api.create(ctx, req)
		if err == nil {
			return sb, nil
		}
		last = err
		var ae *APIError
		if ctx.Err() != nil || (errors.As(err, &ae) && ae.Status != http.StatusBadGateway && ae.Status != http.StatusGatewayTimeout) {
			return nil, err
		}
	}
	return nil, last
}

// Open reattaches to sandbox id: a parked sandbox is started and its
// daemon restarted; a running one is reused, its daemon restarted only if
// it does not answer or runs another version. The network policy is
// updated when it differs from spec's. A sandbox that is gone is
// errdefs.ErrNotFound; one in an error state is errdefs.ErrConflict.
func (p *Provider) Open(ctx context.Context, id string, spec sandbox.Spec) (sandbox.Sandbox, error) {
	if err := checkSpec(spec); err != nil {
		return nil, err
	}
	pol, err := policyFor(spec.Network)
	if err != nil {
		return nil, err
	}
	log := p.log.With(logkey.Sandbox, id, logkey.Session, spec.SessionID)
	sb, err := p.settle(ctx, id)
	if err != nil {
		return nil, err
	}
	fresh := false
	switch sb.State {
	case "started":
	case "stopped", "archived", "paused":
		// Start resumes all three; nothing runs in them, daemon included.
		fresh = true
		log.Info("resuming parked sandbox", "state", sb.State)
		if _, err := p.api.action(ctx, id, "start"); err != nil {
			return nil, stateErr(err, id, sb.State)
		}
		if sb, err = p.settle(ctx, id); err != nil {
			return nil, err
		}
		if sb.State != "started" {
			return nil, stateErr(errors.New("did not start"), id, sb.State)
		}
	default:
		return nil, stateErr(errors.New("cannot be opened"), id, sb.State)
	}
	if live := livePolicy(sb); !live.equal(pol) {
		log.Info("updating network policy", "from", live.String(), "to", pol.String())
		if err := p.api.setNetwork(ctx, id, pol.settings()); err != nil {
			return nil, stateErr(err, id, sb.State)
		}
	}
	return p.attach(ctx, sb, fresh, log)
}

// settle gets sandbox id and waits while it is in a transition.
func (p *Provider) settle(ctx context.Context, id string) (*apiSandbox, error) {
	deadline := p.cfg.Clock.Now().Add(p.cfg.StartTimeout)
	wait := 100 * time.Millisecond
	for {
		sb, err := p.api.get(ctx, id)
		if err != nil {
			if errors.Is(err, errdefs.ErrNotFound) {
				return nil, fmt.Errorf("daytona sandbox %s is gone: %w", id, err)
			}
			return nil, err
		}
		switch sb.State {
		case "started", "stopped", "archived", "paused":
			return sb, nil
		case "destroyed", "destroying":
			return nil, errdefs.With(errdefs.ErrNotFound, fmt.Errorf("daytona sandbox %s is %s", id, sb.State))
		case "error", "build_failed", "unknown":
			reason := sb.ErrorReason
			if reason == "" {
				reason = "no reason given"
			}
			return nil, errdefs.With(errdefs.ErrConflict, fmt.Errorf("daytona sandbox %s is in state %s: %s", id, sb.State, reason))
		}
		if p.cfg.Clock.Now().After(deadline) {
			return nil, errdefs.With(errdefs.ErrUnavailable, fmt.Errorf("daytona sandbox %s still %s after %s", id, sb.State, p.cfg.StartTimeout))
		}
		if err := p.api.sleep(ctx, wait); err != nil {
			return nil, fmt.Errorf("daytona sandbox %s (state %s): %w", id, sb.State, err)
		}
		wait = min(wait*3/2, time.Second)
	}
}

// stateErr adds the sandbox and the state it was in to err.
func stateErr(err error, id, state string) error {
	return fmt.Errorf("daytona sandbox %s (state %s): %w", id, state, err)
}

// safeVersion is what a version may hold: it becomes part of a file name
// and of the daemon's start command.
var safeVersion = regexp.MustCompile(`^[A-Za-z0-9._+-]+$`)

// Listed is a sandbox as List reports it.
type Listed struct {
	ID     string
	State  string
	Labels map[string]string
}

// List returns the sandboxes labelled with this runner's RunnerID, for a
// reaper that deletes what no session owns. It needs Config.RunnerID.
func (p *Provider) List(ctx context.Context) ([]Listed, error) {
	if p.cfg.RunnerID == "" {
		return nil, errdefs.Invalidf("daytona: listing the runner's sandboxes needs a runner id")
	}
	found, err := p.api.findByLabel(ctx, LabelRunner, p.cfg.RunnerID)
	if err != nil {
		return nil, err
	}
	out := make([]Listed, 0, len(found))
	for _, sb := range found {
		out = append(out, Listed{ID: sb.ID, State: sb.State, Labels: sb.Labels})
	}
	return out, nil
}

// ListIDs is List for the runner's reaper (sandbox.Lister): the ids of
// this runner's sandboxes, without those already being deleted.
func (p *Provider) ListIDs(ctx context.Context) ([]string, error) {
	found, err := p.List(ctx)
	if err != nil {
		return nil, err
	}
	ids := make([]string, 0, len(found))
	for _, sb := range found {
		if sb.State == "destroying" || sb.State == "destroyed" {
			continue
		}
		ids = append(ids, sb.ID)
	}
	return ids, nil
}

// Remove deletes sandbox id without opening it, so a parked sandbox is
// not started only to be deleted. A sandbox already gone is no error.
func (p *Provider) Remove(ctx context.Context, id string) error {
	ctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), 2*time.Minute)
	defer cancel()
	if err := p.remove(ctx, id); err != nil {
		return fmt.Errorf("daytona sandbox %s: %w", id, err)
	}
	p.log.Info("sandbox removed", logkey.Sandbox, id)
	return nil
}

// checkBinary makes sure the daemon binary can run in a Daytona sandbox:
// a Linux executable. A runner on macOS, say, must be given a Linux build.
func checkBinary(path string, logger *slog.Logger) error {
	f, err := elf.Open(path)
	if err != nil {
		return errdefs.Invalidf("daytona: daemon binary %q is not a Linux executable (%v); build one with GOOS=linux GOARCH=amd64 CGO_ENABLED=0", path, err)
	}
	defer f.Close()
	if f.Machine != elf.EM_X86_64 {
		logger.Warn("daemon binary is not amd64; it runs only on sandboxes of its architecture", "path", path, "machine", f.Machine.String())
	}
	for _, p := range f.Progs {
		if p.Type == elf.PT_INTERP {
			logger.Warn("daemon binary is dynamically linked; it runs only on images with a matching libc", "path", path)
			break
		}
	}
	return nil
}
