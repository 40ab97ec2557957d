package local

import (
	"testing"

	"github.com/google/go-cmp/cmp"
)

// TestSocketPaths: pathname sockets are read from /proc/net/unix with
// spaces in their names kept; abstract and unnamed ones are skipped.
func TestSocketPaths(t *testing.T) {
	const table = `Num       RefCount Protocol Flags    Type St Inode Path
00000000db4c7074: 00000002 00000000 00010000 0001 01  4556 /var/run/postgresql/.s.PGSQL.5432
000000000fdc98e9: 00000002 00000000 00010000 0001 01 10076 /srv/my dir/a sock
00000000e4e1ee3f: 00000003 00000000 00000000 0001 03  1659
0000000085671864: 00000002 00000000 00010000 0001 01  7225 @/tmp/.X11-unix/X0
`
	got := socketPaths(table)
	want := []string{"/var/run/postgresql/.s.PGSQL.5432", "/srv/my dir/a sock"}
	if diff := cmp.Diff(want, got); diff != "" {
		t.Error(diff)
	}
}
