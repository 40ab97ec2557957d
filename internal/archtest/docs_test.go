package archtest

import (
	"io/fs"
	"os"
	"path/filepath"
	"regexp"
	"strings"
	"testing"
)

// root is the repository's root, two levels above this package.
const root = "../.."

var (
	mdLink  = regexp.MustCompile(`\]\(([^)\s]+)\)`)
	heading = regexp.MustCompile("(?m)^#{1,6} +(.+?) *$")
	// A comment may point into docs/; anything it names outside the
	// repository a reader cannot open.
	outside  = regexp.MustCompile(`reference [0-9]+\.[0-9]|\(reference\s*$|DESIGN\.md|\.\./shared|shared/reference|(^|[^/])protocols\.md`)
	docsPath = regexp.MustCompile(`docs/[a-z-]+\.md`)
)

// markdown lists README.md and every file under docs/.
func markdown(t *testing.T) []string {
	t.Helper()
	files := []string{filepath.Join(root, "README.md")}
	docs, err := filepath.Glob(filepath.Join(root, "docs", "*.md"))
	if err != nil {
		t.Fatal(err)
	}
	return append(files, docs...)
}

// slug is a heading's anchor as GitHub renders it: lowercase, spaces to
// hyphens, punctuation other than hyphens and underscores dropped.
func slug(h string) string {
	var b strings.Builder
	for _, r := range strings.ToLower(h) {
		switch {
		case r == ' ':
			b.WriteRune('-')
		case r == '-' || r == '_' || r >= 'a' && r <= 'z' || r >= '0' && r <= '9' || r > 127:
			b.WriteRune(r)
		}
	}
	return b.String()
}

func anchors(t *testing.T, file string) map[string]bool {
	t.Helper()
	data, err := os.ReadFile(file)
	if err != nil {
		t.Fatal(err)
	}
	out := map[string]bool{}
	inFence := false
	for _, line := range strings.Split(string(data), "\n") {
		if strings.HasPrefix(line, "```") {
			inFence = !inFence
		}
		if m := heading.FindStringSubmatch(line); m != nil && !inFence {
			out[slug(strings.ReplaceAll(m[1], "`", ""))] = true
		}
	}
	return out
}

// TestDocLinks: every relative link in the README and docs/ names a file
// that exists, and a heading in it when it names one.
func TestDocLinks(t *testing.T) {
	for _, file := range markdown(t) {
		data, err := os.ReadFile(file)
		if err != nil {
			t.Fatal(err)
		}
		for _, m := range mdLink.FindAllStringSubmatch(string(data), -1) {
			target := m[1]
			if strings.Contains(target, "://") || strings.HasPrefix(target, "mailto:") {
				continue
			}
			path, anchor, _ := strings.Cut(target, "#")
			dest := file
			if path != "" {
				dest = filepath.Join(filepath.Dir(file), path)
			}
			if _, err := os.Stat(dest); err != nil {
				t.Errorf("%s links %s: %v", tidy(file), target, err)
				continue
			}
			if anchor != "" && !anchors(t, dest)[anchor] {
				t.Errorf("%s links %s: %s has no heading with anchor #%s", tidy(file), target, tidy(dest), anchor)
			}
		}
	}
}

// TestCommentsCiteTheRepository: Go comments point at docs/ in the
// repository, never at files outside it, and the docs they name exist.
func TestCommentsCiteTheRepository(t *testing.T) {
	err := filepath.WalkDir(root, func(path string, d fs.DirEntry, err error) error {
		if err != nil {
			return err
		}
		if d.IsDir() && (d.Name() == ".git" || d.Name() == "testdata") {
			return filepath.SkipDir
		}
		if d.IsDir() || !strings.HasSuffix(path, ".go") {
			return nil
		}
		data, err := os.ReadFile(path)
		if err != nil {
			return err
		}
		for i, line := range strings.Split(string(data), "\n") {
			_, comment, ok := strings.Cut(line, "//")
			if !ok {
				continue
			}
			if outside.MatchString(comment) {
				t.Errorf("%s:%d cites a file outside the repository: %s (write the fact into docs/ and point there)", tidy(path), i+1, strings.TrimSpace(comment))
			}
			for _, doc := range docsPath.FindAllString(comment, -1) {
				if _, err := os.Stat(filepath.Join(root, doc)); err != nil {
					t.Errorf("%s:%d cites %s, which does not exist", tidy(path), i+1, doc)
				}
			}
		}
		return nil
	})
	if err != nil {
		t.Fatal(err)
	}
}

// tidy is a path as seen from the repository's root.
func tidy(path string) string { return strings.TrimPrefix(filepath.ToSlash(path), root+"/") }
