//go:build !linux

package sqlite

// freeBytes is unknown here: only the write probe runs.
func freeBytes(string) (uint64, bool, error) { return 0, false, nil }
