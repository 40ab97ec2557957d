// Package workspacetest is the conformance suite every workspace.Store
// passes, and a SeaweedFS server for tests that need a real S3 store.
package workspacetest

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"io"
	"strings"
	"sync"
	"testing"

	"github.com/google/go-cmp/cmp"

	"github.com/agentrunner/runner/internal/errdefs"
	"github.com/agentrunner/runner/internal/workspace"
)

// Run runs the conformance suite; open returns an empty store.
func Run(t *testing.T, open func(t *testing.T) workspace.Store) {
	ctx := context.Background()
	t.Run("PutGet", func(t *testing.T) {
		s := open(t)
		put(t, s, "a/b/c.txt", "hello")
		if got := get(t, s, "a/b/c.txt"); got != "hello" {
			t.Fatalf("get = %q, want hello", got)
		}
		put(t, s, "a/b/c.txt", "replaced")
		if got := get(t, s, "a/b/c.txt"); got != "replaced" {
			t.Fatalf("get after overwrite = %q", got)
		}
	})
	t.Run("EmptyObject", func(t *testing.T) {
		s := open(t)
		put(t, s, "empty", "")
		if got := get(t, s, "empty"); got != "" {
			t.Fatalf("get = %q, want empty", got)
		}
	})
	t.Run("LargeObject", func(t *testing.T) {
		s := open(t)
		big := strings.Repeat("0123456789abcdef", 1<<16) // 1 MiB
		put(t, s, "big.bin", big)
		if got := get(t, s, "big.bin"); got != big {
			t.Fatalf("large object came back with %d bytes, want %d", len(got), len(big))
		}
	})
	t.Run("MissingIsNotFound", func(t *testing.T) {
		s := open(t)
		_, err := s.Get(ctx, "nope/missing")
		if !errors.Is(err, errdefs.ErrNotFound) {
			t.Fatalf("get missing: %v, want ErrNotFound", err)
		}
		put(t, s, "dir/file", "x")
		if _, err := s.Get(ctx, "dir"); !errors.Is(err, errdefs.ErrNotFound) {
			t.Fatalf("get of a key prefix: %v, want ErrNotFound", err)
		}
	})
	t.Run("Delete", func(t *testing.T) {
		s := open(t)
		put(t, s, "d/x", "1")
		put(t, s, "d/y", "2")
		if err := s.Delete(ctx, "d/x"); err != nil {
			t.Fatal(err)
		}
		if _, err := s.Get(ctx, "d/x"); !errors.Is(err, errdefs.ErrNotFound) {
			t.Fatalf("get deleted: %v", err)
		}
		if err := s.Delete(ctx, "d/x"); err != nil {
			t.Fatalf("delete missing: %v, want nil", err)
		}
		if got := get(t, s, "d/y"); got != "2" {
			t.Fatalf("sibling = %q", got)
		}
	})
	t.Run("List", func(t *testing.T) {
		s := open(t)
		for _, k := range []string{"p/b", "p/a/x", "p/a/y", "q/z", "pz"} {
			put(t, s, k, k)
		}
		for _, tc := range []struct {
			prefix string
			want   []string
		}{
			{"", []string{"p/a/x", "p/a/y", "p/b", "pz", "q/z"}},
			{"p/", []string{"p/a/x", "p/a/y", "p/b"}},
			{"p/a", []string{"p/a/x", "p/a/y"}},
			{"p", []string{"p/a/x", "p/a/y", "p/b", "pz"}},
			{"none/", nil},
		} {
			got, err := s.List(ctx, tc.prefix)
			if err != nil {
				t.Fatalf("list %q: %v", tc.prefix, err)
			}
			if diff := cmp.Diff(tc.want, got, cmp.Comparer(func(a, b []string) bool { return len(a) == 0 && len(b) == 0 || cmp.Equal(a, b) })); diff != "" {
				t.Errorf("list %q (-want +got):\n%s", tc.prefix, diff)
			}
		}
	})
	t.Run("InvalidKeys", func(t *testing.T) {
		s := open(t)
		for _, k := range []string{"", "/abs", "a/../b", "..", "a//b", "a/", "./a"} {
			if err := s.Put(ctx, k, strings.NewReader("x"), 1); !errors.Is(err, errdefs.ErrInvalid) {
				t.Errorf("put %q: %v, want ErrInvalid", k, err)
			}
			if _, err := s.Get(ctx, k); !errors.Is(err, errdefs.ErrInvalid) {
				t.Errorf("get %q: %v, want ErrInvalid", k, err)
			}
		}
	})
	t.Run("Prefixed", func(t *testing.T) {
		s := open(t)
		sub := workspace.Prefixed(s, "sessions/p1/")
		put(t, sub, "f", "in sub")
		if got := get(t, s, "sessions/p1/f"); got != "in sub" {
			t.Fatalf("through the base = %q", got)
		}
		keys, err := sub.List(ctx, "")
		if err != nil || !cmp.Equal(keys, []string{"f"}) {
			t.Fatalf("sub list = %v, %v", keys, err)
		}
		if err := sub.Put(ctx, "../escape", strings.NewReader("x"), 1); !errors.Is(err, errdefs.ErrInvalid) {
			t.Fatalf("escape: %v", err)
		}
	})
	t.Run("Concurrent", func(t *testing.T) {
		s := open(t)
		var wg sync.WaitGroup
		errs := make(chan error, 16)
		for i := range 16 {
			wg.Add(1)
			go func() {
				defer wg.Done()
				v := fmt.Sprint(i)
				if err := s.Put(ctx, "c/"+v, strings.NewReader(v), int64(len(v))); err != nil {
					errs <- err
				}
			}()
		}
		wg.Wait()
		close(errs)
		for err := range errs {
			t.Fatal(err)
		}
		keys, err := s.List(ctx, "c/")
		if err != nil || len(keys) != 16 {
			t.Fatalf("list = %d keys, %v", len(keys), err)
		}
	})
	t.Run("StringNamesTheStore", func(t *testing.T) {
		if s := open(t); s.String() == "" {
			t.Fatal("String is empty")
		}
	})
}

func put(t *testing.T, s workspace.Store, key, v string) {
	t.Helper()
	if err := s.Put(context.Background(), key, bytes.NewReader([]byte(v)), int64(len(v))); err != nil {
		t.Fatalf("put %s: %v", key, err)
	}
}

func get(t *testing.T, s workspace.Store, key string) string {
	t.Helper()
	rc, err := s.Get(context.Background(), key)
	if err != nil {
		t.Fatalf("get %s: %v", key, err)
	}
	defer rc.Close()
	b, err := io.ReadAll(rc)
	if err != nil {
		t.Fatalf("read %s: %v", key, err)
	}
	return string(b)
}
