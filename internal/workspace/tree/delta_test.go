package tree_test

import (
	"fmt"
	"math/rand/v2"
	"slices"
	"strings"
	"testing"

	"github.com/google/go-cmp/cmp"
	"github.com/google/go-cmp/cmp/cmpopts"

	"github.com/agentrunner/runner/internal/workspace/tree"
)

// randomTree is a sorted list of entries drawn from a small name space,
// so that two draws share, change and lack paths.
func randomTree(r *rand.Rand) []tree.Entry {
	var es []tree.Entry
	for _, p := range []string{"a", "a-b", "a.txt", "a/x", "a/y/z", "a0", "b", "b/c", "c"} {
		if r.IntN(3) == 0 {
			continue
		}
		es = append(es, tree.Entry{Path: p, Kind: tree.File, Mode: 0o644, Hash: fmt.Sprint(r.IntN(2)), Size: int64(r.IntN(2))})
	}
	slices.SortFunc(es, func(a, b tree.Entry) int { return strings.Compare(a.Path, b.Path) })
	return es
}

func TestDiffApply(t *testing.T) {
	r := rand.New(rand.NewPCG(1, 2))
	for range 2000 {
		old, cur := randomTree(r), randomTree(r)
		changed, removed := tree.Diff(old, cur)
		got, err := tree.Apply(old, changed, removed)
		if err != nil {
			t.Fatalf("apply %v %v to %v: %v", changed, removed, old, err)
		}
		if diff := cmp.Diff(cur, got, cmpopts.EquateEmpty()); diff != "" {
			t.Fatalf("apply(diff) (-want +got):\n%s", diff)
		}
	}
	same := []tree.Entry{{Path: "a", Kind: tree.Dir}, {Path: "a/b", Kind: tree.File, Hash: "h"}}
	if c, rm := tree.Diff(same, slices.Clone(same)); len(c) != 0 || len(rm) != 0 {
		t.Fatalf("diff of a tree with itself: %v, %v", c, rm)
	}
}

func TestApplyRefusesAWrongBase(t *testing.T) {
	base := []tree.Entry{{Path: "a"}, {Path: "c"}}
	for name, c := range map[string]struct {
		changed []tree.Entry
		removed []string
	}{
		"removes a path the base lacks": {removed: []string{"b"}},
		"removes past the end":          {removed: []string{"d"}},
		"changed out of order":          {changed: []tree.Entry{{Path: "b"}, {Path: "a"}}},
		"removed out of order":          {removed: []string{"c", "a"}},
	} {
		if _, err := tree.Apply(base, c.changed, c.removed); err == nil {
			t.Errorf("%s: accepted", name)
		}
	}
	if _, err := tree.Apply([]tree.Entry{{Path: "b"}, {Path: "a"}}, nil, nil); err == nil {
		t.Error("an unsorted base was accepted")
	}
}
