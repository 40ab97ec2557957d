package sqlite

import (
	"os"

	"golang.org/x/sys/unix"
)

// freeBytes is the space left for this process on dir's filesystem:
// root may use the blocks reserved for it.
func freeBytes(dir string) (uint64, bool, error) {
	var st unix.Statfs_t
	if err := unix.Statfs(dir, &st); err != nil {
		return 0, false, err
	}
	blocks := st.Bavail
	if os.Geteuid() == 0 {
		blocks = st.Bfree
	}
	return blocks * uint64(st.Bsize), true, nil
}
