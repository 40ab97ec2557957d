package archtest

import (
	"cmp"
	"fmt"
	"go/ast"
	"go/parser"
	"go/token"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"
)

// shapeDirs are the packages whose largest files and functions the shape
// report lists: where the turn and the wiring live, and where size grew
// before.
var shapeDirs = []string{"internal/runner", "cmd/runner"}

type sized struct {
	name  string
	lines int
}

// The turn's package stays readable by file name: the redesign (issue
// 23) split its 933-line turn.go and 138-line functions, and this keeps
// them split.
const (
	maxRunnerFileLines = 400
	maxRunnerFuncLines = 80
)

// TestRunnerSize: no non-test file in internal/runner is over
// maxRunnerFileLines lines, and no function over maxRunnerFuncLines.
func TestRunnerSize(t *testing.T) {
	files, funcs := sizes(t, "../runner")
	if len(files) == 0 {
		t.Fatal("no Go files in internal/runner: is the test run from internal/archtest?")
	}
	for _, f := range files {
		if f.lines > maxRunnerFileLines {
			t.Errorf("internal/runner/%s has %d lines (at most %d): split it by what its parts do", f.name, f.lines, maxRunnerFileLines)
		}
	}
	for _, f := range funcs {
		if f.lines > maxRunnerFuncLines {
			t.Errorf("internal/runner/%s has %d lines (at most %d): give its steps names of their own", f.name, f.lines, maxRunnerFuncLines)
		}
	}
}

// TestShape writes the figures docs/architecture.md's "shape of the code"
// quotes, for the checkout named by RUNNER_SHAPE (a directory; "." for
// this one): the largest non-test files and functions of shapeDirs, the
// packages per layer (this tree's layers table applied to that
// checkout, so an older commit is placed as the packages are now), and
// the imports that do not go down the layers. It only reports; the
// layers themselves are TestImportTable's.
func TestShape(t *testing.T) {
	root := os.Getenv("RUNNER_SHAPE")
	if root == "" {
		t.Skip("set RUNNER_SHAPE to a checkout's directory (. for this one) to print its shape")
	}
	if root == "." {
		root = "../.."
	}
	pkgs := listIn(t, root)
	var out strings.Builder
	for _, dir := range shapeDirs {
		files, funcs := sizes(t, filepath.Join(root, dir))
		fmt.Fprintf(&out, "%s: %d non-test files, %d lines, %d functions\n", dir, len(files), total(files), len(funcs))
		fmt.Fprintf(&out, "  largest files: %s\n", top(files, 10))
		fmt.Fprintf(&out, "  largest functions: %s\n", top(funcs, 10))
	}
	perLayer := map[int][]string{}
	up := 0
	for _, p := range pkgs {
		name := rel(p.ImportPath)
		l, ok := layerOf(name)
		if !ok {
			l = -1 // not placed by this tree's table
		}
		perLayer[l] = append(perLayer[l], name)
		for _, imp := range p.Imports {
			if !strings.HasPrefix(imp, module+"/") || !ok {
				continue
			}
			if li, _ := layerOf(rel(imp)); li >= l && l != kitLayer {
				up++
				fmt.Fprintf(&out, "  arrow across or up: %s (%d) -> %s (%d)\n", name, l, rel(imp), li)
			}
		}
	}
	fmt.Fprintf(&out, "packages: %d; imports across or up the layers: %d\n", len(pkgs), up)
	for _, l := range slices.Sorted(func(yield func(int) bool) {
		for l := range perLayer {
			if !yield(l) {
				return
			}
		}
	}) {
		fmt.Fprintf(&out, "  layer %d: %d (%s)\n", l, len(perLayer[l]), strings.Join(perLayer[l], " "))
	}
	t.Log("\n" + out.String())
}

// sizes are the lines of each non-test Go file in dir, and of each
// function or method declared in them (from func to its closing brace).
func sizes(t *testing.T, dir string) (files, funcs []sized) {
	t.Helper()
	fset := token.NewFileSet()
	names, err := filepath.Glob(filepath.Join(dir, "*.go"))
	if err != nil {
		t.Fatal(err)
	}
	for _, path := range names {
		if strings.HasSuffix(path, "_test.go") {
			continue
		}
		f, err := parser.ParseFile(fset, path, nil, parser.SkipObjectResolution)
		if err != nil {
			t.Fatal(err)
		}
		base := filepath.Base(path)
		files = append(files, sized{base, fset.File(f.Pos()).LineCount()})
		for _, d := range f.Decls {
			fn, ok := d.(*ast.FuncDecl)
			if !ok {
				continue
			}
			name := fn.Name.Name
			if fn.Recv != nil && len(fn.Recv.List) > 0 {
				name = recvName(fn.Recv.List[0].Type) + "." + name
			}
			n := fset.Position(fn.End()).Line - fset.Position(fn.Pos()).Line + 1
			funcs = append(funcs, sized{base + ":" + name, n})
		}
	}
	return files, funcs
}

func recvName(e ast.Expr) string {
	switch e := e.(type) {
	case *ast.StarExpr:
		return recvName(e.X)
	case *ast.IndexExpr:
		return recvName(e.X)
	case *ast.IndexListExpr:
		return recvName(e.X)
	case *ast.Ident:
		return e.Name
	}
	return "?"
}

func total(s []sized) (n int) {
	for _, x := range s {
		n += x.lines
	}
	return n
}

// top is the n largest of s, "name lines" each, largest first.
func top(s []sized, n int) string {
	s = slices.Clone(s)
	slices.SortFunc(s, func(a, b sized) int { return cmp.Or(b.lines-a.lines, strings.Compare(a.name, b.name)) })
	var parts []string
	for _, x := range s[:min(n, len(s))] {
		parts = append(parts, fmt.Sprintf("%s %d", x.name, x.lines))
	}
	return strings.Join(parts, ", ")
}
