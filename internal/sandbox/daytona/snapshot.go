package daytona

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"net/http"
	"regexp"
	"strings"
	"time"

	"github.com/agentrunner/runner/internal/errdefs"
	"github.com/agentrunner/runner/internal/logkey"
)

// HarnessPrefix is where a snapshot built by BuildSnapshot installs the
// harness adapters: one npm prefix per install, <HarnessPrefix>/<Dir>,
// the same layout as the runner's own harness dir (internal/harness), so
// a harness's ACP command inside the sandbox is
// <HarnessPrefix>/<Dir>/node_modules/.bin/<bin>.
const HarnessPrefix = "/opt/runner/harnesses"

// DefaultSnapshot is the snapshot name the provider expects by default
// (DAYTONA_SNAPSHOT's default).
const DefaultSnapshot = "agentrunner-sandbox-v1"

// DefaultBaseImage has Node.js 20 and npm, which the pinned harness
// versions need.
const DefaultBaseImage = "node:20-bookworm-slim"

// SnapshotSpec is the snapshot to build.
type SnapshotSpec struct {
	Name string // default DefaultSnapshot
	// Base is the image to start from; it must have Node.js 20 or newer
	// and npm, and a tag other than latest (default DefaultBaseImage).
	Base string
	// Installs are the harness adapters to install.
	Installs []SnapshotInstall
	// CPU (vCPUs), MemoryGB and DiskGB are the resources of sandboxes made
	// from the snapshot (Daytona refuses resources on a create from a
	// snapshot, so they are fixed here); zero means Daytona's default.
	CPU, MemoryGB, DiskGB int
	// Wait polls until the snapshot is active (or failed).
	Wait bool
	// Timeout bounds the wait (default 30 min: builds with several npm
	// installs take minutes).
	Timeout time.Duration
}

// SnapshotInstall is one npm prefix, HarnessPrefix/Dir.
type SnapshotInstall struct {
	Dir string
	// Packages are name@version, installed together at exact versions.
	Packages []string
	// Bins are npm bins that must exist after the install; the build
	// fails otherwise, rather than a turn failing later.
	Bins []string
}

// Snapshot is a Daytona snapshot as the API reports it.
type Snapshot struct {
	ID          string
	Name        string
	State       string // pending, building, pulling, active, error, build_failed …
	ErrorReason string
	// Existing is true when a snapshot of that name was there already
	// and was kept instead of built.
	Existing bool
	// Differs is true for an existing snapshot whose Dockerfile is not
	// the one this spec gives (other harness versions, say).
	Differs bool
}

// apiSnapshot is the part of Daytona's SnapshotDto we use.
type apiSnapshot struct {
	ID          string     `json:"id"`
	Name        string     `json:"name"`
	State       string     `json:"state"`
	ErrorReason string     `json:"errorReason,omitempty"`
	BuildInfo   *buildInfo `json:"buildInfo,omitempty"`
}

// createSnapshotRequest is Daytona's CreateSnapshot, the fields we set.
type createSnapshotRequest struct {
	Name       string     `json:"name"`
	BuildInfo  *buildInfo `json:"buildInfo,omitempty"`
	CPU        int        `json:"cpu,omitempty"`
	Memory     int        `json:"memory,omitempty"`
	Disk       int        `json:"disk,omitempty"`
	Entrypoint []string   `json:"entrypoint,omitempty"`
}

// Snapshots builds snapshots. It needs only the API key: unlike the
// Provider, it uploads no daemon binary, so it runs on any host.
type Snapshots struct {
	api *api
	log *slog.Logger
}

// NewSnapshots returns a snapshot builder for cfg's APIKey, APIURL,
// HTTPClient and Clock; the other fields are ignored.
func NewSnapshots(cfg Config, logger *slog.Logger) (*Snapshots, error) {
	if logger == nil {
		logger = slog.New(slog.DiscardHandler)
	}
	if cfg.APIKey == "" {
		return nil, errdefs.Invalidf("daytona: an API key is required (DAYTONA_API_KEY)")
	}
	if cfg.APIURL == "" {
		cfg.APIURL = "https://app.daytona.io/api"
	}
	if cfg.HTTPClient == nil {
		cfg.HTTPClient = &http.Client{}
	}
	if cfg.Clock == nil {
		cfg.Clock = realClock{}
	}
	return &Snapshots{
		api: &api{base: strings.TrimSuffix(cfg.APIURL, "/"), key: cfg.APIKey, hc: cfg.HTTPClient, clock: cfg.Clock, log: logger, attempts: 6},
		log: logger.With(logkey.Provider, "daytona"),
	}, nil
}

var (
	// Daytona's own rule for snapshot and image names.
	imageName  = regexp.MustCompile(`^[a-zA-Z0-9_.\-:]+(/[a-zA-Z0-9_.\-:]+)*(@sha256:[a-f0-9]{64})?$`)
	npmPackage = regexp.MustCompile(`^(@[a-z0-9][a-z0-9._-]*/)?[a-z0-9][a-z0-9._-]*@[A-Za-z0-9][A-Za-z0-9._+-]*$`)
	safeWord   = regexp.MustCompile(`^[A-Za-z0-9][A-Za-z0-9._-]*$`)
)

func (s *SnapshotSpec) normalize() error {
	if s.Name == "" {
		s.Name = DefaultSnapshot
	}
	if s.Base == "" {
		s.Base = DefaultBaseImage
	}
	if s.Timeout <= 0 {
		s.Timeout = 30 * time.Minute
	}
	var errs []error
	if !imageName.MatchString(s.Name) {
		errs = append(errs, errdefs.Invalidf("snapshot name %q: letters, digits, '.', '_', '-', ':' and '/' only", s.Name))
	}
	// A moving tag would make two builds of one name differ.
	_, tag, tagged := strings.Cut(s.Base[strings.LastIndex(s.Base, "/")+1:], ":")
	if !imageName.MatchString(s.Base) || (!tagged && !strings.Contains(s.Base, "@sha256:")) || tag == "latest" {
		errs = append(errs, errdefs.Invalidf("base image %q: name an image with a tag other than latest, or a digest", s.Base))
	}
	if len(s.Installs) == 0 {
		errs = append(errs, errdefs.Invalidf("snapshot %s: no harness to install", s.Name))
	}
	for _, in := range s.Installs {
		if !safeWord.MatchString(in.Dir) {
			errs = append(errs, errdefs.Invalidf("install dir %q: letters, digits, '.', '_' and '-' only", in.Dir))
		}
		if len(in.Packages) == 0 {
			errs = append(errs, errdefs.Invalidf("install %s: no package", in.Dir))
		}
		// These go into shell commands of the Dockerfile.
		for _, p := range in.Packages {
			if !npmPackage.MatchString(p) {
				errs = append(errs, errdefs.Invalidf("install %s: %q is not an npm package at an exact version (name@version)", in.Dir, p))
			}
		}
		for _, b := range in.Bins {
			if !safeWord.MatchString(b) {
				errs = append(errs, errdefs.Invalidf("install %s: bin %q: letters, digits, '.', '_' and '-' only", in.Dir, b))
			}
		}
	}
	return errors.Join(errs...)
}

// Dockerfile returns the Dockerfile of spec: the base image, a few tools
// harnesses call (git, ripgrep), then one npm prefix per install under
// HarnessPrefix with the exact versions checked after the install. The
// runner binary is not in it: the provider uploads it into each sandbox,
// matching the runner's version, so one snapshot serves every release.
func Dockerfile(spec SnapshotSpec) (string, error) {
	if err := spec.normalize(); err != nil {
		return "", err
	}
	var b strings.Builder
	fmt.Fprintf(&b, "# Built by `runner daytona snapshot build` for the runner's Daytona provider.\n")
	fmt.Fprintf(&b, "FROM %s\n", spec.Base)
	b.WriteString("RUN node -e 'process.exit(+process.versions.node.split(\".\")[0] >= 20 ? 0 : 1)' " +
		"|| { echo 'the base image needs Node.js 20 or newer with npm' >&2; exit 1; }\n")
	b.WriteString("RUN apt-get update && apt-get install -y --no-install-recommends ca-certificates git ripgrep procps " +
		"&& rm -rf /var/lib/apt/lists/*\n")
	for _, in := range spec.Installs {
		prefix := HarnessPrefix + "/" + in.Dir
		fmt.Fprintf(&b, "RUN npm install --prefix %s --save-exact --no-audit --no-fund --no-update-notifier %s", prefix, strings.Join(in.Packages, " "))
		for _, p := range in.Packages {
			i := strings.LastIndex(p, "@")
			name, version := p[:i], p[i+1:]
			fmt.Fprintf(&b, " \\\n && test \"$(node -p \"require('%s/node_modules/%s/package.json').version\")\" = %s", prefix, name, version)
		}
		for _, bin := range in.Bins {
			fmt.Fprintf(&b, " \\\n && test -x %s/node_modules/.bin/%s", prefix, bin)
		}
		b.WriteString(" \\\n && npm cache clean --force\n")
	}
	// Sandboxes may run as a non-root user (Daytona's "daytona").
	fmt.Fprintf(&b, "RUN chmod -R a+rX %s\n", HarnessPrefix)
	// Daytona keeps a sandbox alive with its entrypoint; the base image's
	// (node) would exit at once.
	b.WriteString("ENTRYPOINT [\"sleep\", \"infinity\"]\n")
	return b.String(), nil
}

// Build creates snapshot spec with POST /snapshots and, with spec.Wait,
// polls it until it is active. A name that exists already is not built
// again: an active snapshot of that name is returned with Existing set (and
// Differs when its Dockerfile is not spec's), one still building is waited
// for, a failed one is an error saying to delete it or choose another name.
// A build that fails is an error with Daytona's reason.
func (s *Snapshots) Build(ctx context.Context, spec SnapshotSpec) (Snapshot, error) {
	dockerfile, err := Dockerfile(spec)
	if err != nil {
		return Snapshot{}, err
	}
	_ = spec.normalize() // defaults, as Dockerfile applied them to its copy
	req := createSnapshotRequest{
		Name:       spec.Name,
		BuildInfo:  &buildInfo{DockerfileContent: dockerfile, ContextHashes: []string{}},
		CPU:        spec.CPU,
		Memory:     spec.MemoryGB,
		Disk:       spec.DiskGB,
		Entrypoint: []string{"sleep", "infinity"},
	}
	var snap apiSnapshot
	err = s.api.do(ctx, call{op: "create snapshot " + spec.Name, method: http.MethodPost, url: s.api.url("/snapshots"), body: req, out: &snap, once: true})
	existing := false
	if err != nil {
		if !duplicate(err) {
			return Snapshot{}, err
		}
		got, gerr := s.get(ctx, spec.Name)
		if gerr != nil {
			return Snapshot{}, errors.Join(err, gerr)
		}
		snap, existing = *got, true
		s.log.Info("snapshot exists already; not building it again", "snapshot", spec.Name, "state", snap.State)
	} else {
		s.log.Info("snapshot build started", "snapshot", spec.Name, "id", snap.ID, "state", snap.State)
	}
	out := Snapshot{ID: snap.ID, Name: snap.Name, State: snap.State, ErrorReason: snap.ErrorReason, Existing: existing}
	if out.Name == "" {
		out.Name = spec.Name
	}
	if existing && snap.BuildInfo != nil && snap.BuildInfo.DockerfileContent != dockerfile {
		out.Differs = true
	}
	if failedSnapshot(out.State) {
		return out, snapshotErr(out, existing)
	}
	if !spec.Wait || out.State == "active" {
		return out, nil
	}
	return s.wait(ctx, out, spec.Timeout)
}

// duplicate reports Daytona's refusal of a name in use: 409, or a 400
// saying so (some releases answer a unique-violation that way).
func duplicate(err error) bool {
	var ae *APIError
	if !errors.As(err, &ae) {
		return false
	}
	return ae.Status == http.StatusConflict ||
		(ae.Status == http.StatusBadRequest && strings.Contains(strings.ToLower(ae.Message), "already exists"))
}

func failedSnapshot(state string) bool {
	return state == "error" || state == "build_failed"
}

func snapshotErr(snap Snapshot, existing bool) error {
	reason := snap.ErrorReason
	if reason == "" {
		reason = "no reason given"
	}
	err := fmt.Errorf("daytona snapshot %s (id %s) is in state %s: %s", snap.Name, snap.ID, snap.State, reason)
	if existing {
		err = fmt.Errorf("%w; it existed before this build: delete it in Daytona or build under another name (--name)", err)
	}
	return errdefs.With(errdefs.ErrConflict, err)
}

// get returns snapshot nameOrID (Daytona accepts either).
func (s *Snapshots) get(ctx context.Context, nameOrID string) (*apiSnapshot, error) {
	var snap apiSnapshot
	err := s.api.do(ctx, call{op: "get snapshot " + nameOrID, method: http.MethodGet, url: s.api.url("/snapshots/%s", nameOrID), out: &snap})
	return &snap, err
}

// wait polls snap until it is active or failed.
func (s *Snapshots) wait(ctx context.Context, snap Snapshot, timeout time.Duration) (Snapshot, error) {
	deadline := s.api.clock.Now().Add(timeout)
	pause := time.Second
	key := snap.ID
	if key == "" {
		key = snap.Name
	}
	for {
		got, err := s.get(ctx, key)
		if err != nil {
			return snap, fmt.Errorf("daytona snapshot %s (state %s): %w", snap.Name, snap.State, err)
		}
		if got.State != snap.State {
			s.log.Info("snapshot state", "snapshot", snap.Name, "state", got.State)
		}
		snap.State, snap.ErrorReason = got.State, got.ErrorReason
		switch {
		case snap.State == "active":
			return snap, nil
		case failedSnapshot(snap.State):
			return snap, snapshotErr(snap, snap.Existing)
		case snap.State == "inactive" || snap.State == "removing":
			return snap, errdefs.With(errdefs.ErrConflict, fmt.Errorf("daytona snapshot %s (id %s) is %s: activate it in Daytona or build under another name", snap.Name, snap.ID, snap.State))
		}
		if s.api.clock.Now().After(deadline) {
			return snap, errdefs.With(errdefs.ErrUnavailable, fmt.Errorf("daytona snapshot %s still %s after %s", snap.Name, snap.State, timeout))
		}
		if err := s.api.sleep(ctx, pause); err != nil {
			return snap, fmt.Errorf("daytona snapshot %s (state %s): %w", snap.Name, snap.State, err)
		}
		pause = min(pause*3/2, 10*time.Second)
	}
}
