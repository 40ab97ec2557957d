package workspace

import (
	"strings"
	"testing"
)

// TestProjectSegmentApart: no two projects share a key segment, however
// they are named: the empty one, "default", names that look hashed or
// escaped, and names too long to escape.
func TestProjectSegmentApart(t *testing.T) {
	long := strings.Repeat("p", 300)
	hashed := Segment(long)
	projects := []string{"", "default", "_default", "__default", long, hashed, "_" + hashed, "a/b", "a%2Fb", "_", "__"}
	seen := map[string]string{}
	for _, p := range projects {
		s := ProjectSegment(p)
		if other, ok := seen[s]; ok {
			t.Errorf("projects %q and %q share the segment %q", other, p, s)
		}
		seen[s] = p
		if s == "" || s == "." || s == ".." || strings.Contains(s, "/") {
			t.Errorf("project %q: segment %q is not one safe path segment", p, s)
		}
	}
	if got := ProjectSegment(""); got != "default" {
		t.Errorf("the empty project's segment = %q, want default (where its workspaces are)", got)
	}
	if got := ProjectSegment("projA"); got != "projA" {
		t.Errorf("projA's segment = %q, want it unchanged", got)
	}
}
