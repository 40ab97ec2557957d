package kubernetes

import (
	"context"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"net"
	"strings"
	"time"

	networkingv1 "k8s.io/api/networking/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"github.com/agentrunner/runner/internal/logkey"
	"github.com/agentrunner/runner/internal/sandbox"
)

// The probe asks the cluster itself instead of guessing: one sandbox pod,
// made as any other (so with the provider's own RBAC and under its
// NetworkPolicy, network off: deny all egress), dials its node's kubelet
// (the pod's hostIP, port 10250: an address every node has, which a pod
// reaches when no policy stands between). If the dial connects under
// deny-all, nothing enforces the policy. The same pod then gets a policy
// allowing all egress and must connect: otherwise the target was never
// reachable (a node firewall, another kubelet port) and the probe proves
// nothing, and the heuristic answers instead. The dial is bash's
// /dev/tcp under coreutils' timeout, both in the project's image; an
// image without them makes the probe inconclusive the same way.

// probeSettle bounds how long a policy change may take to reach the pod's
// rules (controllers apply them asynchronously, in seconds).
const probeSettle = 30 * time.Second

// probePace spaces the probe's dials.
const probePace = 500 * time.Millisecond

// probeKubeletPort is the kubelet's default port, the probe's target.
const probeKubeletPort = "10250"

// StartPolicyProbe runs ProbePolicyEnforcement in the background, bounded
// by timeout, logging its finding (loudly when the policy is advisory) or,
// when the probe cannot tell, the heuristic's. Close stops it and waits.
func (p *Provider) StartPolicyProbe(timeout time.Duration) {
	ctx, cancel := context.WithTimeout(context.Background(), timeout)
	done := make(chan struct{})
	p.probeMu.Lock()
	p.probeStop, p.probeDone = cancel, done
	p.probeMu.Unlock()
	go func() {
		defer close(done)
		defer cancel()
		e, err := p.ProbePolicyEnforcement(ctx)
		if err != nil {
			p.log.Warn("kubernetes sandboxes: the NetworkPolicy probe could not tell, falling back to the API groups the cluster serves (docs/kubernetes.md)", logkey.Error, err)
			p.ReportPolicyEnforcement(ctx)
			return
		}
		logEnforcement(p.log, e)
	}()
}

// ReportPolicyEnforcement logs what the served API groups say about
// NetworkPolicy enforcement (DetectPolicyEnforcement), loudly when no
// enforcing CNI is found.
func (p *Provider) ReportPolicyEnforcement(ctx context.Context) {
	e, err := p.DetectPolicyEnforcement(ctx)
	if err != nil {
		p.log.Warn("kubernetes sandboxes: could not tell whether the cluster enforces NetworkPolicy; network off, on and allowlist are NetworkPolicies, advisory on a CNI that does not implement them (docs/kubernetes.md)", logkey.Error, err)
		return
	}
	logEnforcement(p.log, e)
}

// stopProbe cancels a running probe and waits for it (and its pod's
// removal).
func (p *Provider) stopProbe() {
	p.probeMu.Lock()
	stop, done := p.probeStop, p.probeDone
	p.probeMu.Unlock()
	if stop != nil {
		stop()
		<-done
	}
}

func logEnforcement(log *slog.Logger, e PolicyEnforcement) {
	switch {
	case e.Probed && !e.Enforced:
		log.Error("KUBERNETES SANDBOX NETWORK POLICY IS NOT ENFORCED: "+e.String()+" (docs/kubernetes.md)", "probed", true, "enforced", false)
	case e.Probed:
		log.Info("kubernetes sandboxes: "+e.String(), "probed", true, "enforced", true)
	case len(e.CNIs) == 0:
		log.Warn("KUBERNETES SANDBOX NETWORK POLICY MAY NOT BE ENFORCED: "+e.String()+"; check the cluster's CNI before relying on network off, on or allowlist (docs/kubernetes.md)", "probed", false, "detected", false)
	default:
		log.Info("kubernetes sandboxes: "+e.String()+" (a heuristic: docs/kubernetes.md)", "probed", false, "detected", true)
	}
}

// ProbePolicyEnforcement starts one probe pod and tells whether the
// cluster enforces its NetworkPolicy (see above). An error means the probe
// could not tell; the finding is kept for Describe only when it could.
func (p *Provider) ProbePolicyEnforcement(ctx context.Context) (PolicyEnforcement, error) {
	sb, err := p.Create(ctx, sandbox.Spec{SessionID: "network-policy-probe", Network: sandbox.Network{Mode: "off"}})
	if err != nil {
		return PolicyEnforcement{}, fmt.Errorf("kubernetes: network policy probe: start its pod: %w", err)
	}
	defer func() {
		// Its own deadline: the probe's may be what ended it.
		dctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), time.Minute)
		defer cancel()
		if err := sb.Destroy(dctx); err != nil {
			p.log.Warn("kubernetes sandboxes: remove the NetworkPolicy probe's pod", "pod", sb.Info().ID, logkey.Error, err)
		}
	}()
	name := sb.Info().ID
	pod, err := p.client.CoreV1().Pods(p.cfg.Namespace).Get(ctx, name, metav1.GetOptions{})
	if err != nil {
		return PolicyEnforcement{}, p.apiErr(fmt.Errorf("kubernetes: network policy probe: get pod %s/%s: %w", p.cfg.Namespace, name, err))
	}
	if pod.Status.HostIP == "" {
		return PolicyEnforcement{}, fmt.Errorf("kubernetes: network policy probe: pod %s/%s has no hostIP", p.cfg.Namespace, name)
	}
	target := net.JoinHostPort(pod.Status.HostIP, probeKubeletPort)
	// Under deny-all: a connection now and until the rules settle means
	// nothing enforces the policy.
	denied, err := dialUntil(ctx, sb, target, false)
	if err != nil {
		return PolicyEnforcement{}, err
	}
	if err := p.setProbeEgress(ctx, name, true); err != nil {
		return PolicyEnforcement{}, err
	}
	reached, err := dialUntil(ctx, sb, target, true)
	if err != nil {
		return PolicyEnforcement{}, err
	}
	if !reached {
		return PolicyEnforcement{}, fmt.Errorf("kubernetes: network policy probe: the probe pod could not reach its node's kubelet at %s even with all egress allowed, so a refusal proves nothing", target)
	}
	e := PolicyEnforcement{Probed: true, Enforced: denied, Target: target}
	p.enforcement.Store(&e)
	return e, nil
}

// setProbeEgress replaces the probe's policy with one allowing all egress
// (allow) or none.
func (p *Provider) setProbeEgress(ctx context.Context, name string, allow bool) error {
	api := p.client.NetworkingV1().NetworkPolicies(p.cfg.Namespace)
	cur, err := api.Get(ctx, name, metav1.GetOptions{})
	if err != nil {
		return p.apiErr(fmt.Errorf("kubernetes: network policy probe: get network policy %s/%s: %w", p.cfg.Namespace, name, err))
	}
	cur.Spec.Egress = []networkingv1.NetworkPolicyEgressRule{}
	if allow {
		// One empty rule: every destination.
		cur.Spec.Egress = []networkingv1.NetworkPolicyEgressRule{{}}
	}
	if _, err := api.Update(ctx, cur, metav1.UpdateOptions{}); err != nil {
		return p.apiErr(fmt.Errorf("kubernetes: network policy probe: update network policy %s/%s: %w", p.cfg.Namespace, name, err))
	}
	return nil
}

// dialUntil dials target from inside sb until the outcome is want or
// probeSettle has passed, and says whether it was want.
func dialUntil(ctx context.Context, sb sandbox.Sandbox, target string, want bool) (bool, error) {
	host, port, _ := net.SplitHostPort(target)
	script := fmt.Sprintf(`timeout 2 bash -c 'exec 3<>/dev/tcp/%s/%s' 2>/dev/null && echo open || echo closed`, host, port)
	deadline := time.Now().Add(probeSettle)
	// Paced: each dial is an exec stream through the API server.
	tick := time.NewTicker(probePace)
	defer tick.Stop()
	for {
		out, err := run(ctx, sb, script)
		if err != nil {
			return false, fmt.Errorf("kubernetes: network policy probe: dial %s from the probe pod: %w", target, err)
		}
		switch strings.TrimSpace(out) {
		case "open", "closed":
		default:
			return false, fmt.Errorf("kubernetes: network policy probe: dial %s from the probe pod said %q: the sandbox image needs bash and timeout for the probe", target, out)
		}
		if (strings.TrimSpace(out) == "open") == want {
			return true, nil
		}
		if time.Now().After(deadline) {
			return false, nil
		}
		select {
		case <-ctx.Done():
			return false, fmt.Errorf("kubernetes: network policy probe: dial %s: %w", target, ctx.Err())
		case <-tick.C:
		}
	}
}

// run runs script with sh -c in sb and returns its stdout.
func run(ctx context.Context, sb sandbox.Sandbox, script string) (string, error) {
	proc, err := sb.Start(ctx, sandbox.Cmd{Path: "/bin/sh", Args: []string{"-c", script}, Env: []string{"PATH=/usr/local/bin:/usr/bin:/bin", "HOME=" + sb.Info().Home, "LANG=C"}})
	if err != nil {
		return "", err
	}
	proc.Stdin().Close()
	out, rerr := io.ReadAll(io.LimitReader(proc.Stdout(), 4096))
	return string(out), errors.Join(proc.Wait(), rerr)
}
