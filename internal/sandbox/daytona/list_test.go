package daytona_test

import (
	"slices"
	"testing"

	"github.com/google/go-cmp/cmp"

	"github.com/agentrunner/runner/internal/sandbox"
	"github.com/agentrunner/runner/internal/sandbox/daytona"
	"github.com/agentrunner/runner/internal/sandbox/daytona/daytonatest"
)

// ListIDs follows the list's cursor, and leaves out other runners'
// sandboxes and those being deleted.
func TestListIDsPages(t *testing.T) {
	if testing.Short() {
		t.Skip("pages through many sandboxes of the fake Daytona API: skipped under -short")
	}
	t.Parallel()
	fake := daytonatest.New(t, daytonatest.Options{ListLimit: 2})
	p := newProvider(t, fake, nil)
	other := newProvider(t, fake, func(c *daytona.Config) { c.RunnerID = "someone-else" })
	var want []string
	for range 5 {
		want = append(want, create(t, p, sandbox.Spec{}).Info().ID)
	}
	create(t, other, sandbox.Spec{})
	gone := want[0]
	if err := p.Remove(t.Context(), gone); err != nil {
		t.Fatal(err)
	}
	want = want[1:]

	got, err := p.ListIDs(t.Context())
	if err != nil {
		t.Fatal(err)
	}
	slices.Sort(got)
	slices.Sort(want)
	if diff := cmp.Diff(want, got); diff != "" {
		t.Errorf("ListIDs (-want +got):\n%s", diff)
	}
	if n := fake.Count("GET /api/sandbox"); n < 3 {
		t.Errorf("%d list calls for 6 sandboxes in pages of 2, want at least 3", n)
	}
}
