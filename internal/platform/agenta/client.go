// Package agenta is the platform client for Agenta's API: the calls the
// reference runner makes back to the platform, authenticated as the
// invoke caller with the run's credential, and the mirror that makes
// them for every session turn without ever failing or slowing it.
package agenta

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"mime"
	"net/http"
	"net/url"
	"strings"
	"sync"
	"time"

	"github.com/agentrunner/runner/internal/errdefs"
	"github.com/agentrunner/runner/internal/metrics"
	"github.com/agentrunner/runner/internal/platform"
	"github.com/agentrunner/runner/internal/wire"
)

// DefaultBase is the platform API when nothing names another (the
// compose service name).
const DefaultBase = "http://api:8000"

// maxAttachmentBytes bounds one attachment: above the platform's largest
// per-file cap, so a bigger body cannot be a stored attachment.
const maxAttachmentBytes = 16 << 20

// Config configures the client and its mirror.
type Config struct {
	// Base is AGENTA_API_INTERNAL_URL, else AGENTA_API_URL; empty: the
	// request's OTLP endpoint before /otlp/, else DefaultBase.
	Base string
	// ReplicaID names this runner in heartbeats (the session owner key).
	ReplicaID string
	// HeartbeatInterval is how often a running turn beats (30 s): the
	// bound on how late a Stop pressed on the platform takes effect.
	HeartbeatInterval time.Duration
	// RefreshInterval is how old the run credential may get before it is
	// refreshed with GET /access/permissions/check (5 min; the platform's
	// ephemeral credentials last about 15).
	RefreshInterval time.Duration
	// QueueMax bounds the calls waiting for the platform (10000); beyond
	// it new calls are dropped and counted.
	QueueMax int
	// RetryBase and RetryMax shape the backoff between attempts (100 ms
	// doubling to 5 s); a call is given up after RetryFor (15 min).
	RetryBase, RetryMax, RetryFor time.Duration
	// Timeout bounds one HTTP call (10 s).
	Timeout time.Duration
	HTTP    *http.Client
	// Metrics is told of every call the mirror makes (each attempt);
	// nil counts nothing.
	Metrics metrics.Platform
	Logger  *slog.Logger
}

func (c *Config) defaults() {
	if c.HeartbeatInterval <= 0 {
		c.HeartbeatInterval = 30 * time.Second
	}
	if c.RefreshInterval <= 0 {
		c.RefreshInterval = 5 * time.Minute
	}
	if c.QueueMax <= 0 {
		c.QueueMax = 10000
	}
	if c.RetryBase <= 0 {
		c.RetryBase = 100 * time.Millisecond
	}
	if c.RetryMax <= 0 {
		c.RetryMax = 5 * time.Second
	}
	if c.RetryFor <= 0 {
		c.RetryFor = 15 * time.Minute
	}
	if c.Timeout <= 0 {
		c.Timeout = 10 * time.Second
	}
	if c.HTTP == nil {
		c.HTTP = &http.Client{}
	}
	if c.Metrics == nil {
		c.Metrics = metrics.Nop{}
	}
	if c.Logger == nil {
		c.Logger = slog.New(slog.DiscardHandler)
	}
}

// BaseFor resolves the platform API for a request: the configured base,
// else the request's OTLP endpoint before /otlp/, else DefaultBase.
func BaseFor(configured string, req *wire.Request) string {
	if b := strings.TrimRight(strings.TrimSpace(configured), "/"); b != "" {
		return b
	}
	if req != nil {
		ep, _ := req.TelemetryConfig().OTLP()
		if b := wire.APIBaseFromOTLP(ep); b != "" {
			return b
		}
	}
	return DefaultBase
}

// Conn is the platform as one run reaches it: its API base and the
// run's credential, refreshed as it ages. It implements the platform
// interfaces.
type Conn struct {
	base string
	cfg  *Config

	// mu guards the following.
	mu         sync.Mutex
	credential string
	obtained   time.Time
}

var (
	_ platform.Records      = (*Conn)(nil)
	_ platform.Streams      = (*Conn)(nil)
	_ platform.Interactions = (*Conn)(nil)
	_ platform.Turns        = (*Conn)(nil)
	_ platform.Attachments  = (*Conn)(nil)
	_ platform.MountSigner  = (*Conn)(nil)
)

// NewConn returns a connection to the platform at base with credential
// (the request's telemetry.exporters.otlp.headers.authorization).
func NewConn(cfg Config, base, credential string) *Conn {
	cfg.defaults()
	return &Conn{base: strings.TrimRight(base, "/"), cfg: &cfg, credential: credential, obtained: time.Now()}
}

// Base is the API base the connection calls.
func (c *Conn) Base() string { return c.base }

// Credential is the run credential as last refreshed.
func (c *Conn) Credential() string {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.credential
}

// StatusError is a platform answer outside 2xx.
type StatusError struct {
	Method, Path string
	Code         int
	Body         string
}

func (e *StatusError) Error() string {
	return fmt.Sprintf("platform %s %s: HTTP %d %s", e.Method, e.Path, e.Code, e.Body)
}

// retryable reports whether a failed call may succeed later: the
// platform unreachable, overloaded or failing, not refusing the call.
func retryable(err error) bool {
	var se *StatusError
	if errors.As(err, &se) {
		return se.Code >= 500 || se.Code == http.StatusTooManyRequests || se.Code == http.StatusRequestTimeout || se.Code == http.StatusUnauthorized
	}
	return err != nil && !errors.Is(err, context.Canceled)
}

// Refresh exchanges the run credential for a fresh one
// (GET /access/permissions/check?action=run_service&resource_type=service).
func (c *Conn) Refresh(ctx context.Context) error {
	var out struct {
		Credentials string `json:"credentials"`
	}
	if err := c.send(ctx, http.MethodGet, "/access/permissions/check?action=run_service&resource_type=service", nil, &out); err != nil {
		return fmt.Errorf("refresh the run credential: %w", err)
	}
	c.mu.Lock()
	defer c.mu.Unlock()
	if out.Credentials != "" {
		c.credential = out.Credentials
	}
	c.obtained = time.Now()
	return nil
}

// refreshIfOld refreshes the credential when it is older than the
// refresh interval, before it expires.
func (c *Conn) refreshIfOld(ctx context.Context) {
	c.mu.Lock()
	old := time.Since(c.obtained) >= c.cfg.RefreshInterval
	c.mu.Unlock()
	if old {
		if err := c.Refresh(ctx); err != nil {
			c.cfg.Logger.Warn("platform credential refresh failed; keeping the current one", "err", err)
		}
	}
}

// call sends one JSON call; a 401 refreshes the credential once and
// retries.
func (c *Conn) call(ctx context.Context, method, path string, in, out any) error {
	c.refreshIfOld(ctx)
	err := c.send(ctx, method, path, in, out)
	var se *StatusError
	if errors.As(err, &se) && se.Code == http.StatusUnauthorized {
		if c.Refresh(ctx) == nil {
			err = c.send(ctx, method, path, in, out)
		}
	}
	return err
}

func (c *Conn) send(ctx context.Context, method, path string, in, out any) error {
	ctx, cancel := context.WithTimeout(ctx, c.cfg.Timeout)
	defer cancel()
	var body io.Reader
	if in != nil {
		b, err := json.Marshal(in)
		if err != nil {
			return fmt.Errorf("encode %s: %w", path, err)
		}
		body = bytes.NewReader(b)
	}
	req, err := http.NewRequestWithContext(ctx, method, c.base+path, body)
	if err != nil {
		return fmt.Errorf("platform %s %s: %w", method, path, err)
	}
	if in != nil {
		req.Header.Set("Content-Type", "application/json")
	}
	req.Header.Set("Authorization", c.Credential())
	resp, err := c.cfg.HTTP.Do(req)
	if err != nil {
		return fmt.Errorf("platform %s %s: %w", method, path, err)
	}
	defer resp.Body.Close()
	if resp.StatusCode < 200 || resp.StatusCode > 299 {
		b, _ := io.ReadAll(io.LimitReader(resp.Body, 512))
		return &StatusError{Method: method, Path: strings.SplitN(path, "?", 2)[0], Code: resp.StatusCode, Body: strings.TrimSpace(string(b))}
	}
	if out == nil {
		_, _ = io.Copy(io.Discard, io.LimitReader(resp.Body, 1<<20))
		return nil
	}
	if err := json.NewDecoder(io.LimitReader(resp.Body, 4<<20)).Decode(out); err != nil {
		return fmt.Errorf("platform %s %s: decode reply: %w", method, path, err)
	}
	return nil
}

// IngestRecord implements platform.Records.
func (c *Conn) IngestRecord(ctx context.Context, r platform.Record) error {
	return c.call(ctx, http.MethodPost, "/sessions/records/ingest", r, nil)
}

// Heartbeat implements platform.Streams.
func (c *Conn) Heartbeat(ctx context.Context, h platform.Heartbeat) (platform.HeartbeatReply, error) {
	var out struct {
		Stream *struct {
			ID        string `json:"id"`
			ProjectID string `json:"project_id"`
		} `json:"stream"`
		ReplicaID     string `json:"replica_id"`
		IsCurrentTurn *bool  `json:"is_current_turn"`
	}
	if err := c.call(ctx, http.MethodPost, "/sessions/streams/heartbeat", h, &out); err != nil {
		return platform.HeartbeatReply{CurrentTurn: true}, err
	}
	r := platform.HeartbeatReply{ReplicaID: out.ReplicaID, CurrentTurn: out.IsCurrentTurn == nil || *out.IsCurrentTurn}
	if out.Stream != nil {
		r.StreamID, r.ProjectID = out.Stream.ID, out.Stream.ProjectID
	}
	return r, nil
}

// CreateInteraction implements platform.Interactions.
func (c *Conn) CreateInteraction(ctx context.Context, i platform.Interaction) error {
	return c.call(ctx, http.MethodPost, "/sessions/interactions/", i, nil)
}

// TransitionInteraction implements platform.Interactions.
func (c *Conn) TransitionInteraction(ctx context.Context, t platform.Transition) error {
	return c.call(ctx, http.MethodPost, "/sessions/interactions/transition", t, nil)
}

// CancelStaleInteractions implements platform.Interactions.
func (c *Conn) CancelStaleInteractions(ctx context.Context, cs platform.CancelStale) error {
	return c.call(ctx, http.MethodPost, "/sessions/interactions/cancel-stale", cs, nil)
}

// StartTurn implements platform.Turns; a duplicate start (409) is not an
// error: a resume reuses the row.
func (c *Conn) StartTurn(ctx context.Context, t platform.TurnStart) error {
	err := c.call(ctx, http.MethodPost, "/sessions/turns/", t, nil)
	var se *StatusError
	if errors.As(err, &se) && se.Code == http.StatusConflict {
		return nil
	}
	return err
}

// CompleteTurn implements platform.Turns.
func (c *Conn) CompleteTurn(ctx context.Context, t platform.TurnComplete) error {
	return c.call(ctx, http.MethodPost, "/sessions/turns/complete", t, nil)
}

// FetchAttachment implements platform.Attachments: the bytes with the
// platform's verified media type and file name.
func (c *Conn) FetchAttachment(ctx context.Context, sessionID, id string) (platform.Attachment, error) {
	c.refreshIfOld(ctx)
	ctx, cancel := context.WithTimeout(ctx, c.cfg.Timeout)
	defer cancel()
	path := "/sessions/attachments/" + url.PathEscape(id) + "/content?session_id=" + url.QueryEscape(sessionID)
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, c.base+path, nil)
	if err != nil {
		return platform.Attachment{}, fmt.Errorf("attachment %s: %w", id, err)
	}
	req.Header.Set("Authorization", c.Credential())
	resp, err := c.cfg.HTTP.Do(req)
	if err != nil {
		return platform.Attachment{}, fmt.Errorf("attachment %s: %w", id, err)
	}
	defer resp.Body.Close()
	if resp.StatusCode != http.StatusOK {
		return platform.Attachment{}, fmt.Errorf("attachment %s: %w", id, &StatusError{Method: "GET", Path: "/sessions/attachments/{id}/content", Code: resp.StatusCode})
	}
	mt, _, _ := mime.ParseMediaType(resp.Header.Get("Content-Type"))
	name := ""
	if _, params, err := mime.ParseMediaType(resp.Header.Get("Content-Disposition")); err == nil {
		name = params["filename"]
	}
	if resp.ContentLength > maxAttachmentBytes {
		return platform.Attachment{}, fmt.Errorf("attachment %s: %d bytes exceeds the %d byte limit", id, resp.ContentLength, maxAttachmentBytes)
	}
	data, err := io.ReadAll(io.LimitReader(resp.Body, maxAttachmentBytes+1))
	if err != nil {
		return platform.Attachment{}, fmt.Errorf("attachment %s: %w", id, err)
	}
	if len(data) > maxAttachmentBytes {
		return platform.Attachment{}, fmt.Errorf("attachment %s exceeds the %d byte limit", id, maxAttachmentBytes)
	}
	return platform.Attachment{Filename: name, MediaType: strings.ToLower(mt), Data: data}, nil
}

// ReferenceAttachments implements platform.Attachments: the session
// claims its uploads, so the platform's sweeper keeps them.
func (c *Conn) ReferenceAttachments(ctx context.Context, sessionID string, ids []string) error {
	return c.call(ctx, http.MethodPost, "/sessions/attachments/reference", map[string]any{"session_id": sessionID, "attachment_ids": ids}, nil)
}

type signReply struct {
	Mount *struct {
		ID        string `json:"id"`
		ProjectID string `json:"project_id"`
	} `json:"mount"`
	Credentials *struct {
		Endpoint     string `json:"endpoint"`
		Region       string `json:"region"`
		Bucket       string `json:"bucket"`
		Prefix       string `json:"prefix"`
		AccessKey    string `json:"access_key"`
		SecretKey    string `json:"secret_key"`
		SessionToken string `json:"session_token"`
		ExpiresAt    string `json:"expires_at"`
	} `json:"credentials"`
}

// SignSessionMount implements platform.MountSigner (POST /sessions/mounts/sign).
func (c *Conn) SignSessionMount(ctx context.Context, sessionID, name string) (platform.MountCredentials, error) {
	if name == "" {
		name = "cwd"
	}
	return c.sign(ctx, "/sessions/mounts/sign?session_id="+url.QueryEscape(sessionID)+"&name="+url.QueryEscape(name))
}

// SignAgentMount implements platform.MountSigner (POST /mounts/agents/sign).
func (c *Conn) SignAgentMount(ctx context.Context, artifactID, name string) (platform.MountCredentials, error) {
	if name == "" {
		name = "default"
	}
	return c.sign(ctx, "/mounts/agents/sign?artifact_id="+url.QueryEscape(artifactID)+"&name="+url.QueryEscape(name))
}

func (c *Conn) sign(ctx context.Context, path string) (platform.MountCredentials, error) {
	var out signReply
	if err := c.call(ctx, http.MethodPost, path, nil, &out); err != nil {
		var se *StatusError
		if errors.As(err, &se) && se.Code == http.StatusNotFound {
			return platform.MountCredentials{}, errdefs.With(errdefs.ErrNotFound, err)
		}
		return platform.MountCredentials{}, errdefs.With(errdefs.ErrUnavailable, err)
	}
	cr := out.Credentials
	if cr == nil || cr.Bucket == "" || cr.Prefix == "" || cr.AccessKey == "" || cr.SecretKey == "" {
		return platform.MountCredentials{}, errdefs.With(errdefs.ErrUnavailable, fmt.Errorf("platform %s: the reply has no bucket, prefix or keys", strings.SplitN(path, "?", 2)[0]))
	}
	exp, err := time.Parse(time.RFC3339Nano, cr.ExpiresAt)
	if err != nil {
		// Read as "never expires" it would be used past its end.
		return platform.MountCredentials{}, errdefs.With(errdefs.ErrUnavailable, fmt.Errorf("platform %s: expires_at %q is not an RFC 3339 time", strings.SplitN(path, "?", 2)[0], cr.ExpiresAt))
	}
	m := platform.MountCredentials{
		Endpoint: cr.Endpoint, Region: cr.Region, Bucket: cr.Bucket, Prefix: strings.TrimRight(cr.Prefix, "/"),
		AccessKey: cr.AccessKey, SecretKey: cr.SecretKey, SessionToken: cr.SessionToken, ExpiresAt: exp,
	}
	if out.Mount != nil {
		m.MountID, m.ProjectID = out.Mount.ID, out.Mount.ProjectID
	}
	return m, nil
}
