package cgroup

import (
	"bufio"
	"strings"
)

type mount struct{ point, root string }

// parseMounts maps each v1 controller, and "cgroup2", to its mount.
func parseMounts(mountinfo string) map[string]mount {
	out := map[string]mount{}
	sc := bufio.NewScanner(strings.NewReader(mountinfo))
	for sc.Scan() {
		pre, post, ok := strings.Cut(sc.Text(), " - ")
		if !ok {
			continue
		}
		f, g := strings.Fields(pre), strings.Fields(post)
		if len(f) < 5 || len(g) < 3 {
			continue
		}
		m := mount{point: unescape(f[4]), root: unescape(f[3])}
		switch g[0] {
		case "cgroup2":
			if _, dup := out["cgroup2"]; !dup {
				out["cgroup2"] = m
			}
		case "cgroup":
			for _, opt := range strings.Split(g[2], ",") {
				if _, dup := out[opt]; !dup && opt != "rw" && opt != "ro" {
					out[opt] = m
				}
			}
		}
	}
	return out
}

// parseSelf maps each v1 controller, and "" for v2, to this process's
// cgroup path.
func parseSelf(self string) map[string]string {
	out := map[string]string{}
	for _, line := range strings.Split(self, "\n") {
		parts := strings.SplitN(line, ":", 3)
		if len(parts) != 3 {
			continue
		}
		if parts[1] == "" {
			out[""] = parts[2]
			continue
		}
		for _, c := range strings.Split(parts[1], ",") {
			out[c] = parts[2]
		}
	}
	return out
}

// relTo returns path relative to a mount's root (containers mount a
// sub-tree of the hierarchy).
func relTo(path, root string) string {
	if root == "/" || root == "" {
		return path
	}
	if rel, ok := strings.CutPrefix(path, root); ok {
		return rel
	}
	return path
}

func unescape(s string) string {
	return strings.NewReplacer(`\040`, " ", `\011`, "\t", `\012`, "\n", `\134`, `\`).Replace(s)
}
