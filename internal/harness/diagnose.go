package harness

import (
	"bufio"
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"path"
	"strings"
	"time"

	"github.com/agentrunner/runner/internal/sandbox"
	"github.com/agentrunner/runner/internal/wire"
)

// piDiagnose fails a Pi turn that ended with no text and no tool call
// when Pi's own session file says the model call failed: pi-acp 0.0.24
// ends such a turn with end_turn and drops the error.
func piDiagnose(name string) func(context.Context, DiagnoseInput) error {
	return func(ctx context.Context, in DiagnoseInput) error {
		if in.Output != "" || in.ToolCalls > 0 || in.AgentSessionID == "" {
			return nil
		}
		msg, err := piLastError(ctx, in.Sandbox, in.Home, in.AgentSessionID)
		if err != nil || msg == "" {
			return nil // nothing to add: the turn stands as the harness ended it
		}
		return fmt.Errorf("harness %s: %s", name, msg)
	}
}

// codexDiagnose fails a Codex turn whose thread ended in a system error:
// codex-acp 2.6 (to a client without JetBrains' typed session failures)
// streams the provider's error body as agent text and ends the turn with
// end_turn; the only other sign is a session_info_update whose
// _meta.codex.threadStatus is systemError. The error is the text.
func codexDiagnose(_ context.Context, in DiagnoseInput) error {
	status := ""
	for _, ev := range in.Events {
		if ev.Type != wire.EventData || ev.Name != "acp.session_info_update" {
			continue
		}
		var u struct {
			Meta struct {
				Codex struct {
					ThreadStatus *struct {
						Type string `json:"type"`
					} `json:"threadStatus"`
				} `json:"codex"`
			} `json:"_meta"`
		}
		b, err := json.Marshal(ev.Data)
		if err != nil || json.Unmarshal(b, &u) != nil || u.Meta.Codex.ThreadStatus == nil {
			continue
		}
		status = u.Meta.Codex.ThreadStatus.Type
	}
	if status != "systemError" {
		return nil
	}
	msg := strings.TrimSpace(in.Output)
	if msg == "" {
		msg = "the turn failed (thread status systemError) without a message"
	}
	return fmt.Errorf("harness codex: %s", msg)
}

// piSessionTail is how much of the end of Pi's session file is read: the
// last assistant message is near the end.
const piSessionTail = 256 << 10

// piLastError reads the end of Pi's session file inside the sandbox (a
// process, so it works where the sandbox's files are not on the runner's
// host) and returns the errorMessage of its last assistant message.
func piLastError(ctx context.Context, sb sandbox.Sandbox, home, sessionID string) (string, error) {
	ctx, cancel := context.WithTimeout(ctx, 10*time.Second)
	defer cancel()
	dir := path.Join(home, ".pi", "agent", "sessions")
	p, err := sb.Start(ctx, sandbox.Cmd{
		Path: "/bin/sh",
		Args: []string{"-c", `for f in "$1"/*/*_"$2".jsonl; do [ -f "$f" ] && tail -c "$3" "$f"; done`, "sh", dir, sessionID, fmt.Sprint(piSessionTail)},
		Env:  []string{"PATH=/usr/local/bin:/usr/bin:/bin", "LANG=C.UTF-8"},
	})
	if err != nil {
		return "", err
	}
	_ = p.Stdin().Close()
	b, rerr := io.ReadAll(io.LimitReader(p.Stdout(), piSessionTail+1))
	if werr := p.Wait(); werr != nil || rerr != nil {
		return "", errors.Join(werr, rerr)
	}
	var last string
	sc := bufio.NewScanner(bytes.NewReader(b))
	sc.Buffer(make([]byte, 0, 64<<10), piSessionTail+1)
	for sc.Scan() {
		var e struct {
			Message struct {
				Role         string `json:"role"`
				StopReason   string `json:"stopReason"`
				ErrorMessage string `json:"errorMessage"`
			} `json:"message"`
		}
		if json.Unmarshal(sc.Bytes(), &e) == nil && e.Message.Role == "assistant" {
			last = e.Message.ErrorMessage // a partial first line fails to parse and is skipped
		}
	}
	return last, nil
}
