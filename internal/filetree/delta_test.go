package filetree_test

import (
	"fmt"
	"math/rand/v2"
	"slices"
	"strings"
	"testing"

	"github.com/google/go-cmp/cmp"
	"github.com/google/go-cmp/cmp/cmpopts"

	"github.com/agentrunner/runner/internal/filetree"
)

// randomTree is a sorted list of entries drawn from a small name space,
// so that two draws share, change and lack paths.
func randomTree(r *rand.Rand) []filetree.Entry {
	var es []filetree.Entry
	for _, p := range []string{"a", "a-b", "a.txt", "a/x", "a/y/z", "a0", "b", "b/c", "c"} {
		if r.IntN(3) == 0 {
			continue
		}
		es = append(es, filetree.Entry{Path: p, Kind: filetree.File, Mode: 0o644, Hash: fmt.Sprint(r.IntN(2)), Size: int64(r.IntN(2))})
	}
	slices.SortFunc(es, func(a, b filetree.Entry) int { return strings.Compare(a.Path, b.Path) })
	return es
}

func TestDiffApply(t *testing.T) {
	r := rand.New(rand.NewPCG(1, 2))
	for range 2000 {
		old, cur := randomTree(r), randomTree(r)
		changed, removed := filetree.Diff(old, cur)
		got, err := filetree.Apply(old, changed, removed)
		if err != nil {
			t.Fatalf("apply %v %v to %v: %v", changed, removed, old, err)
		}
		if diff := cmp.Diff(cur, got, cmpopts.EquateEmpty()); diff != "" {
			t.Fatalf("apply(diff) (-want +got):\n%s", diff)
		}
	}
	same := []filetree.Entry{{Path: "a", Kind: filetree.Dir}, {Path: "a/b", Kind: filetree.File, Hash: "h"}}
	if c, rm := filetree.Diff(same, slices.Clone(same)); len(c) != 0 || len(rm) != 0 {
		t.Fatalf("diff of a tree with itself: %v, %v", c, rm)
	}
}

func TestApplyRefusesAWrongBase(t *testing.T) {
	base := []filetree.Entry{{Path: "a"}, {Path: "c"}}
	for name, c := range map[string]struct {
		changed []filetree.Entry
		removed []string
	}{
		"removes a path the base lacks": {removed: []string{"b"}},
		"removes past the end":          {removed: []string{"d"}},
		"changed out of order":          {changed: []filetree.Entry{{Path: "b"}, {Path: "a"}}},
		"removed out of order":          {removed: []string{"c", "a"}},
	} {
		if _, err := filetree.Apply(base, c.changed, c.removed); err == nil {
			t.Errorf("%s: accepted", name)
		}
	}
	if _, err := filetree.Apply([]filetree.Entry{{Path: "b"}, {Path: "a"}}, nil, nil); err == nil {
		t.Error("an unsorted base was accepted")
	}
}
