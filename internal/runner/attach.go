package runner

import (
	"context"
	"encoding/base64"
	"encoding/json"
	"fmt"
	"path"
	"strings"

	"github.com/agentrunner/runner/internal/errdefs"
	"github.com/agentrunner/runner/internal/wire"
)

// attachmentsOf returns a user message's attachment blocks.
func attachmentsOf(m wire.Message) []wire.ContentBlock {
	if m.Role != "user" {
		return nil
	}
	var out []wire.ContentBlock
	for _, b := range m.Content.Blocks {
		if b.Type == "attachment" {
			out = append(out, b)
		}
	}
	return out
}

// checkAttachments refuses attachment blocks that name nothing.
func checkAttachments(blocks []wire.ContentBlock) error {
	for i, b := range blocks {
		if strings.TrimSpace(b.AttachmentID) == "" {
			return errdefs.Invalidf("messages[-1]: attachment block %d has no attachmentId", i)
		}
	}
	return nil
}

// attachmentBlocks fetches the turn's attachments from the platform and
// hands them to the harness: an image block when the harness and model
// take images, otherwise a file in the workspace the prompt points at.
// Each gets an attachment_delivery event.
func (t *turn) attachmentBlocks(ctx context.Context, lv *live) ([]json.RawMessage, error) {
	if len(t.plan.attachments) == 0 {
		return nil, nil
	}
	f := t.attachmentFetcher()
	if f == nil {
		return nil, errdefs.Unprocessablef("messages[-1]: attachment blocks are fetched from the Agenta platform, and this run has no platform credential (telemetry.exporters.otlp.headers.authorization) or AGENTA_RUNNER_PLATFORM=off; send the file as an image or resource block instead")
	}
	images := t.caps != nil && t.caps.Images && modelTakesImages(t.plan.req)
	var out []json.RawMessage
	for _, b := range t.plan.attachments {
		a, err := f.FetchAttachment(ctx, b.AttachmentID)
		if err != nil {
			t.log.Warn("fetch attachment", "attachment", b.AttachmentID, "error", err)
			t.emit(wire.Event{Type: wire.EventAttachment, AttachmentID: b.AttachmentID, Outcome: "failed", ReasonCode: "fetch_failed"})
			out = append(out, textBlock(fmt.Sprintf("[The user attached %q, which could not be fetched.]", b.Filename)))
			continue
		}
		if a.MediaType == "" {
			a.MediaType = b.MimeType
		}
		name := safeFilename(a.Filename, b.Filename, b.AttachmentID)
		if images && strings.HasPrefix(a.MediaType, "image/") {
			raw, _ := json.Marshal(map[string]string{"type": "image", "data": base64.StdEncoding.EncodeToString(a.Data), "mimeType": a.MediaType})
			out = append(out, raw)
			t.emit(wire.Event{Type: wire.EventAttachment, AttachmentID: b.AttachmentID, Outcome: "native", ReasonCode: "native_supported"})
			continue
		}
		rel := path.Join("attachments", name)
		if err := lv.sb.WriteFile(ctx, path.Join(lv.sb.Info().Workdir, rel), a.Data, 0o644); err != nil {
			return nil, fmt.Errorf("write attachment %s into the workspace: %w", name, err)
		}
		reason := "adapter_unsupported"
		if t.caps != nil && t.caps.Images && strings.HasPrefix(a.MediaType, "image/") {
			reason = "model_modality_unsupported"
		}
		t.emit(wire.Event{Type: wire.EventAttachment, AttachmentID: b.AttachmentID, Outcome: "workspace_only", ReasonCode: reason, WorkingPath: rel})
		out = append(out, textBlock(fmt.Sprintf("[The user attached a file, saved in the working directory as %s (%s, %d bytes).]", rel, a.MediaType, len(a.Data))))
	}
	return out, nil
}

// modelTakesImages reads modelCapabilities.inputModalities; absent means
// the model is assumed to take what the harness does.
func modelTakesImages(r *wire.Request) bool {
	if len(r.ModelCapabilities) == 0 {
		return true
	}
	var c struct {
		InputModalities []string `json:"inputModalities"`
	}
	if json.Unmarshal(r.ModelCapabilities, &c) != nil || c.InputModalities == nil {
		return true
	}
	for _, m := range c.InputModalities {
		if m == "image" {
			return true
		}
	}
	return false
}

// safeFilename is a base name that cannot leave the attachments
// directory: the platform's name, else the block's, else the id.
func safeFilename(names ...string) string {
	for _, n := range names {
		n = path.Base(strings.ReplaceAll(n, "\\", "/"))
		n = strings.Map(func(r rune) rune {
			if r < 0x20 || r == 0x7f {
				return -1
			}
			return r
		}, n)
		if n != "" && n != "." && n != ".." && n != "/" {
			return n
		}
	}
	return "attachment"
}
