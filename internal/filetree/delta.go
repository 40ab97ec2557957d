package filetree

import (
	"fmt"
	"strings"
)

// Diff is what turns the entries old into cur (both sorted by path, as a
// Result's are): the entries of cur that are new or differ from old's in
// any field, and the paths of old that cur no longer has. It is how a
// remote watch sends only what changed since the scan its reader holds.
func Diff(old, cur []Entry) (changed []Entry, removed []string) {
	i, j := 0, 0
	for i < len(old) || j < len(cur) {
		switch {
		case j == len(cur) || i < len(old) && old[i].Path < cur[j].Path:
			removed = append(removed, old[i].Path)
			i++
		case i == len(old) || cur[j].Path < old[i].Path:
			changed = append(changed, cur[j])
			j++
		default:
			if old[i] != cur[j] {
				changed = append(changed, cur[j])
			}
			i, j = i+1, j+1
		}
	}
	return changed, removed
}

// Apply is the inverse of Diff: old with changed put in (replacing the
// entries of the same paths) and removed taken out, sorted by path. It
// fails on input that Diff cannot have produced (unsorted, or removing a
// path old lacks), so a delta applied to the wrong base is never a
// silently wrong tree.
func Apply(old, changed []Entry, removed []string) ([]Entry, error) {
	for k := 1; k < len(changed); k++ {
		if changed[k-1].Path >= changed[k].Path {
			return nil, fmt.Errorf("tree delta: changed entries out of order at %q", changed[k].Path)
		}
	}
	for k := 1; k < len(removed); k++ {
		if removed[k-1] >= removed[k] {
			return nil, fmt.Errorf("tree delta: removed paths out of order at %q", removed[k])
		}
	}
	out := make([]Entry, 0, len(old)+len(changed)-len(removed))
	i, j, r := 0, 0, 0
	for i < len(old) || j < len(changed) {
		var next Entry
		switch {
		case j == len(changed) || i < len(old) && old[i].Path < changed[j].Path:
			next = old[i]
			i++
		case i == len(old) || changed[j].Path < old[i].Path:
			next = changed[j]
			j++
		default:
			next = changed[j]
			i, j = i+1, j+1
		}
		if r < len(removed) && removed[r] < next.Path {
			return nil, fmt.Errorf("tree delta: removes %q, which the base does not have", removed[r])
		}
		if r < len(removed) && removed[r] == next.Path {
			r++
			continue
		}
		if n := len(out); n > 0 && strings.Compare(out[n-1].Path, next.Path) >= 0 {
			return nil, fmt.Errorf("tree delta: the base is not sorted at %q", next.Path)
		}
		out = append(out, next)
	}
	if r < len(removed) {
		return nil, fmt.Errorf("tree delta: removes %q, which the base does not have", removed[r])
	}
	return out, nil
}
