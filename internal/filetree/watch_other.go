//go:build !linux

package filetree

import (
	"errors"
	"fmt"
)

// noInotify is Result.Full of every scan of a watch on a system without
// inotify: the watch follows nothing, and each scan reads the whole tree
// as a plain Scan does.
const noInotify = "this system has no inotify: every scan reads the whole tree"

// openLocked makes every watch broken from the start: its scans are full.
func (n *Notifier) openLocked(string) (broken string, err error) { return noInotify, nil }

func (n *Notifier) takeLocked() {}

// addLocked is never reached (a broken watch adds no kernel watch); it
// refuses rather than pretend.
func (n *Notifier) addLocked(abs string) (int32, error) {
	return 0, fmt.Errorf("watch %s: %w", abs, errors.ErrUnsupported)
}

func (n *Notifier) rmLocked(wd int32) { delete(n.wds, wd) }
