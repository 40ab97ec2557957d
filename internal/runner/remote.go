package runner

import (
	"bufio"
	"context"
	"errors"
	"fmt"
	"io"
	"net"
	"strings"
	"sync"

	"github.com/agentrunner/runner/internal/errdefs"
	"github.com/agentrunner/runner/internal/logkey"
	"github.com/agentrunner/runner/internal/sandbox"
	"github.com/agentrunner/runner/internal/store"
	"github.com/agentrunner/runner/internal/tools/relay"
)

// reopen reattaches the session's last sandbox when its provider can
// (a parked remote sandbox: start + reconnect, cheaper than a new one and
// keeping the harness's native transcript). It returns nil when there is
// nothing to reopen or the sandbox is gone; then the turn creates one.
func (c *coldStart) reopen(ctx context.Context, prov sandbox.Provider, spec sandbox.Spec) (sandbox.Sandbox, bool) {
	t := c.t
	o, ok := prov.(sandbox.Opener)
	if !ok || t.key.SessionID == "" {
		return nil, false
	}
	st := t.svc.store
	sess, err := st.GetSession(ctx, t.key)
	if err != nil || sess.SandboxProvider != prov.Name() || sess.SandboxID == "" {
		return nil, false
	}
	rec, err := st.GetSandbox(ctx, prov.Name(), sess.SandboxID)
	if err != nil || rec.State == store.SandboxDestroyed {
		return nil, false
	}
	log := t.log.With(logkey.Sandbox, rec.ID)
	sb, err := o.Open(ctx, rec.ID, spec)
	switch {
	case err == nil:
		log.Info("reopened the session's sandbox", "state", rec.State)
		return sb, true
	case errors.Is(err, errdefs.ErrNotFound):
		log.Info("the session's sandbox is gone; creating a new one")
	default:
		// A sandbox that will not come back is not worth a failed turn:
		// start fresh and replay the history instead.
		log.Warn("reopen the session's sandbox failed; creating a new one", logkey.Error, err)
	}
	rec.State = store.SandboxDestroyed
	if _, err := st.PutSandbox(ctx, rec); err != nil {
		log.Warn("record sandbox", logkey.Error, err)
	}
	return nil, false
}

// channels serve named streams that processes in a remote sandbox open
// back to the runner through its daemon: "tools" (the relay) and "model"
// (the key gateway).
type channels struct {
	ch     sandbox.Channeler
	ctx    context.Context
	cancel context.CancelFunc
	wg     sync.WaitGroup
}

func (lv *live) channels(ch sandbox.Channeler) *channels {
	if lv.channel == nil {
		ctx, cancel := context.WithCancel(context.Background())
		lv.channel = &channels{ch: ch, ctx: ctx, cancel: cancel}
	}
	return lv.channel
}

// serve accepts streams on name and hands each to handle on its own
// goroutine, until stop.
func (c *channels) serve(s *Service, name string, handle func(ctx context.Context, conn io.ReadWriteCloser)) {
	c.wg.Add(1)
	go func() {
		defer c.wg.Done()
		for {
			p, err := c.ch.Accept(c.ctx, name)
			if err != nil {
				if c.ctx.Err() == nil {
					s.log.Warn("sandbox channel closed", "channel", name, logkey.Error, err)
				}
				return
			}
			c.wg.Add(1)
			go func() {
				defer c.wg.Done()
				handle(c.ctx, procConn{p})
			}()
		}
	}()
}

func (c *channels) stop() {
	c.cancel()
	c.wg.Wait()
}

// serveTools relays "tools" streams to the tool relay.
func (lv *live) serveTools(s *Service, ch sandbox.Channeler) {
	r := s.cfg.Tools.Relay
	lv.channels(ch).serve(s, "tools", func(ctx context.Context, conn io.ReadWriteCloser) {
		_ = r.ServeConn(ctx, conn)
	})
}

// serveModel splices "model" streams to the key gateway: inside the
// sandbox, `runner channel-forward` listens on loopback for the harness.
func (lv *live) serveModel(s *Service, ch sandbox.Channeler) {
	addr := s.cfg.Gateway.Addr()
	lv.channels(ch).serve(s, "model", func(ctx context.Context, conn io.ReadWriteCloser) {
		defer conn.Close()
		var d net.Dialer
		up, err := d.DialContext(ctx, "tcp", addr)
		if err != nil {
			return
		}
		defer up.Close()
		done := make(chan struct{})
		go func() {
			_, _ = io.Copy(up, conn)
			if cw, ok := up.(interface{ CloseWrite() error }); ok {
				_ = cw.CloseWrite()
			}
			close(done)
		}()
		_, _ = io.Copy(conn, up)
		_ = conn.Close()
		<-done
	})
}

// startModelForward starts the in-sandbox end of the model channel and
// waits until it listens.
func (c *coldStart) startModelForward(ctx context.Context, lv *live, ch sandbox.Channeler) error {
	t := c.t
	listen := t.svc.modelListen()
	p, err := lv.sb.Start(context.WithoutCancel(ctx), sandbox.Cmd{
		Path: ch.RunnerPath(),
		Args: []string{"channel-forward", listen, "model"},
		Env:  append(append([]string{}, t.svc.cfg.BaseEnv...), ch.ChannelEnv()...),
	})
	if err != nil {
		return fmt.Errorf("start the model forward in the sandbox: %w", err)
	}
	line, err := bufio.NewReader(p.Stdout()).ReadString('\n')
	if err != nil || strings.TrimSpace(line) != "ready" {
		_ = p.Kill()
		return fmt.Errorf("the model forward in the sandbox did not start: %q %v %s", line, err, p.StderrTail())
	}
	lv.forward = p
	return nil
}

// procConn is a channel stream as a ReadWriteCloser.
type procConn struct{ p sandbox.Process }

func (c procConn) Read(b []byte) (int, error)  { return c.p.Stdout().Read(b) }
func (c procConn) Write(b []byte) (int, error) { return c.p.Stdin().Write(b) }
func (c procConn) Close() error {
	_ = c.p.Stdin().Close()
	return c.p.Kill()
}

var _ io.ReadWriteCloser = procConn{}

// channelEnv is the MCP server entry's environment on a remote sandbox:
// the relay token, and how to dial the channel instead of a socket.
func channelEnv(b *relay.Binding, ch sandbox.Channeler) map[string]string {
	env := b.Env("")
	delete(env, relay.EnvSocket)
	for _, kv := range ch.ChannelEnv() {
		if k, v, ok := strings.Cut(kv, "="); ok {
			env[k] = v
		}
	}
	return env
}
