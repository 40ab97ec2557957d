package runner

import (
	"archive/tar"
	"bufio"
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"path"
	"slices"
	"strings"

	"github.com/agentrunner/runner/internal/agent"
	"github.com/agentrunner/runner/internal/errdefs"
	"github.com/agentrunner/runner/internal/filetree"
	"github.com/agentrunner/runner/internal/workspace"
)

// Harnesses name their transcript directories after the working directory
// (Claude's ~/.claude/projects/<key>), and a fresh sandbox may have
// another one: a moved data dir, another replica, another image's $HOME.
// The transcript store records the working directory its transcript was
// written under; a restore into a different one moves the keyed
// directories to the new key before the harness starts, so session/load
// finds them.

// workdirKey is the record's key in the transcript mount's store, beside
// its manifest.
const workdirKey = workspace.MetaDir + "/workdir.json"

// workdirRecord is the working directory a session's transcript was
// written under. Previous is the one the stored manifest may still name
// until the first checkpoint after a move lands (the record is written
// before that checkpoint's manifest), so a restore looks under both.
type workdirRecord struct {
	Workdir  string `json:"workdir"`
	Previous string `json:"previous,omitempty"`
}

func readWorkdirRecord(ctx context.Context, s workspace.Store) (workdirRecord, error) {
	rc, err := s.Get(ctx, workdirKey)
	if errors.Is(err, errdefs.ErrNotFound) {
		return workdirRecord{}, nil
	}
	if err != nil {
		return workdirRecord{}, workspace.StoreError(s.String(), "read "+workdirKey, err)
	}
	defer rc.Close()
	var rec workdirRecord
	if err := json.NewDecoder(io.LimitReader(rc, 64<<10)).Decode(&rec); err != nil {
		return workdirRecord{}, workspace.StoreError(s.String(), "read "+workdirKey, fmt.Errorf("decode: %w", err))
	}
	return rec, nil
}

// rekeyTranscript runs after mount i (the transcript) was restored: it
// moves what the store kept under an earlier working directory's keys to
// workdir's, and notes the record the next checkpoint writes.
func (d *durable) rekeyTranscript(ctx context.Context, t *turn, i int, keyed []agent.KeyedDir, workdir string) error {
	m := d.mounts[i]
	rec, err := readWorkdirRecord(ctx, m.Store)
	if err != nil {
		return err
	}
	if rec.Workdir == workdir {
		d.record = rec
		return nil
	}
	from := ""
	for _, earlier := range []string{rec.Workdir, rec.Previous} {
		if earlier == "" || earlier == workdir {
			continue
		}
		moved, err := moveKeyed(ctx, d.tree, m.Root, d.bases[i], keyed, earlier, workdir)
		if err != nil {
			return fmt.Errorf("move transcript of %s to %s: %w", earlier, workdir, err)
		}
		if moved > 0 {
			t.log.Debug("transcript moved to the new working directory's key", "from", earlier, "to", workdir, "entries", moved)
			if from == "" {
				from = earlier
			}
		}
	}
	d.record, d.recordDirty = workdirRecord{Workdir: workdir, Previous: from}, true
	return nil
}

// moveKeyed moves, in the sandbox's tree at root, every entry of man under
// a keyed directory's key of from to the key of to (replacing what is
// there), and returns how many entries moved.
func moveKeyed(ctx context.Context, tr workspace.Tree, root string, man workspace.Manifest, keyed []agent.KeyedDir, from, to string) (int, error) {
	var buf bytes.Buffer
	tw := tar.NewWriter(&buf)
	moved := 0
	for _, k := range keyed {
		src, dst := path.Join(k.Dir, k.Key(from)), path.Join(k.Dir, k.Key(to))
		if src == dst {
			continue
		}
		var paths []string
		for _, e := range man.Entries {
			if e.Path == src || strings.HasPrefix(e.Path, src+"/") {
				paths = append(paths, e.Path)
			}
		}
		if len(paths) == 0 {
			continue
		}
		n, err := copyRenamed(ctx, tr, root, paths, src, dst, tw, k.FirstLine, from, to)
		if err != nil {
			return 0, err
		}
		moved += n
		for _, drop := range append([]string{src}, k.Drop...) {
			if err := tw.WriteHeader(filetree.DeleteHeader(drop)); err != nil {
				return 0, err
			}
		}
	}
	if moved == 0 {
		return 0, nil
	}
	if err := tw.Close(); err != nil {
		return 0, err
	}
	return moved, tr.Import(ctx, root, &buf)
}

// maxFirstLine bounds the first line a FirstLine rewrite reads: a header,
// not a transcript.
const maxFirstLine = 64 << 10

// copyRenamed exports paths from the tree and writes them to tw with the
// prefix src replaced by dst, each file's first line through firstLine
// (when set) from the working directory from to to.
func copyRenamed(ctx context.Context, tr workspace.Tree, root string, paths []string, src, dst string, tw *tar.Writer, firstLine func([]byte, string, string) []byte, from, to string) (int, error) {
	rc, err := tr.Export(ctx, root, paths)
	if err != nil {
		return 0, err
	}
	defer rc.Close()
	r := tar.NewReader(rc)
	n := 0
	for {
		hdr, err := r.Next()
		if errors.Is(err, io.EOF) {
			return n, nil
		}
		if err != nil {
			return 0, fmt.Errorf("export %s: %w", src, err)
		}
		name := strings.TrimSuffix(hdr.Name, "/")
		if name != src && !strings.HasPrefix(name, src+"/") {
			return 0, fmt.Errorf("export %s: unexpected entry %q", src, hdr.Name)
		}
		hdr.Name = dst + strings.TrimPrefix(name, src)
		var body io.Reader = r
		if firstLine != nil && hdr.Typeflag == tar.TypeReg && hdr.Size > 0 {
			br := bufio.NewReaderSize(io.LimitReader(r, hdr.Size), maxFirstLine)
			line, err := br.ReadSlice('\n')
			if err != nil && !errors.Is(err, io.EOF) && !errors.Is(err, bufio.ErrBufferFull) {
				return 0, fmt.Errorf("export %s: %w", hdr.Name, err)
			}
			line = slices.Clone(line)
			moved := firstLine(line, from, to)
			hdr.Size += int64(len(moved) - len(line))
			body = io.MultiReader(bytes.NewReader(moved), br)
		}
		if err := tw.WriteHeader(hdr); err != nil {
			return 0, err
		}
		if _, err := io.Copy(tw, body); err != nil {
			return 0, fmt.Errorf("export %s: %w", src, err)
		}
		n++
	}
}

// writeRecord stores the transcript's working directory when it changed,
// before the checkpoint of mount i writes a manifest naming its keys.
func (d *durable) writeRecord(ctx context.Context, i int) error {
	if !d.recordDirty {
		return nil
	}
	s := d.mounts[i].Store
	b, _ := json.Marshal(d.record) // two strings always encode
	if err := s.Put(ctx, workdirKey, bytes.NewReader(b), int64(len(b))); err != nil {
		return workspace.StoreError(s.String(), "write "+workdirKey, err)
	}
	d.recordDirty = false
	return nil
}
