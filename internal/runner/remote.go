package runner

import (
	"context"
	"errors"
	"io"
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
func (t *turn) reopen(ctx context.Context, prov sandbox.Provider, spec sandbox.Spec) (sandbox.Sandbox, bool) {
	o, ok := prov.(sandbox.Opener)
	if !ok || t.key == "" {
		return nil, false
	}
	st := t.svc.store
	sess, err := st.GetSession(ctx, t.plan.req.SessionID)
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

// channel serves the tool relay over a remote sandbox's own connection:
// each `runner mcp-stdio` inside dials the "tools" channel.
type channel struct {
	cancel context.CancelFunc
	wg     sync.WaitGroup
	ch     sandbox.Channeler
}

func (lv *live) serveChannel(s *Service, ch sandbox.Channeler) {
	ctx, cancel := context.WithCancel(context.Background())
	c := &channel{cancel: cancel, ch: ch}
	lv.channel = c
	r := s.cfg.Tools.Relay
	c.wg.Add(1)
	go func() {
		defer c.wg.Done()
		for {
			p, err := ch.Accept(ctx, "tools")
			if err != nil {
				if ctx.Err() == nil {
					s.log.Warn("tool channel closed", logkey.Sandbox, lv.sb.Info().ID, logkey.Error, err)
				}
				return
			}
			c.wg.Add(1)
			go func() {
				defer c.wg.Done()
				_ = r.ServeConn(ctx, procConn{p})
			}()
		}
	}()
}

func (c *channel) stop() {
	c.cancel()
	c.wg.Wait()
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
		for i := 0; i < len(kv); i++ {
			if kv[i] == '=' {
				env[kv[:i]] = kv[i+1:]
				break
			}
		}
	}
	return env
}
