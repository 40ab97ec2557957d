// Command testreport reads `go test -json` on stdin and writes what a
// person running `make test` needs: each package's result line as it
// ends, the full output of every failed test, and at the end the skipped
// tests grouped by their reason, which names the variable or package a
// gated suite needs. It exits 1 when a test or a build failed.
package main

import (
	"bufio"
	"encoding/json"
	"fmt"
	"io"
	"os"
	"sort"
	"strings"
)

type event struct {
	Action  string
	Package string
	Test    string
	Output  string
	Elapsed float64
}

type key struct{ pkg, test string }

func main() { os.Exit(report(os.Stdin, os.Stdout)) }

func report(in io.Reader, out io.Writer) int {
	output := map[key][]string{}    // a test's lines, kept until it ends
	pkgOut := map[string][]string{} // a package's own lines, kept until it ends
	skipped := map[string][]string{}
	failed := 0
	sc := bufio.NewScanner(in)
	sc.Buffer(make([]byte, 0, 1<<20), 64<<20)
	for sc.Scan() {
		var e event
		if json.Unmarshal(sc.Bytes(), &e) != nil {
			fmt.Fprintln(out, sc.Text()) // not go test's JSON: a build error, say
			continue
		}
		k := key{e.Package, e.Test}
		switch e.Action {
		case "build-output":
			fmt.Fprint(out, e.Output)
		case "build-fail":
			failed++
		case "output":
			if e.Test == "" {
				// Package lines: its result at once; the rest (a panic,
				// a timeout's goroutine dump, TestMain's output) is kept
				// and shown if the package fails.
				if t := strings.TrimSpace(e.Output); strings.HasPrefix(t, "ok ") || strings.HasPrefix(t, "FAIL") || strings.Contains(t, "[build failed]") {
					fmt.Fprint(out, e.Output)
				} else {
					pkgOut[e.Package] = append(pkgOut[e.Package], e.Output)
				}
				continue
			}
			output[k] = append(output[k], e.Output)
		case "fail":
			if e.Test != "" {
				failed++
				fmt.Fprint(out, strings.Join(output[k], ""))
			} else if e.Package != "" {
				failed++
				// Tests still running when the package failed (a timeout,
				// a panic): their output, then the package's.
				for ok, lines := range output {
					if ok.pkg == e.Package {
						fmt.Fprint(out, strings.Join(lines, ""))
						delete(output, ok)
					}
				}
				fmt.Fprint(out, strings.Join(pkgOut[e.Package], ""))
			}
			delete(pkgOut, e.Package)
			delete(output, k)
		case "skip":
			if e.Test != "" && !strings.Contains(e.Test, "/") {
				reason := skipReason(output[k])
				skipped[reason] = append(skipped[reason], e.Package[strings.LastIndex(e.Package, "/")+1:]+"."+e.Test)
			}
			delete(output, k)
		case "pass":
			if e.Test == "" {
				delete(pkgOut, e.Package)
			}
			delete(output, k)
		}
	}
	if len(skipped) > 0 {
		reasons := make([]string, 0, len(skipped))
		for r := range skipped {
			reasons = append(reasons, r)
		}
		sort.Slice(reasons, func(i, j int) bool { return len(skipped[reasons[i]]) > len(skipped[reasons[j]]) })
		n := 0
		for _, r := range reasons {
			n += len(skipped[r])
		}
		fmt.Fprintf(out, "\n%d tests skipped (gated suites run when their environment is set; see docs/architecture.md, Tests):\n", n)
		for _, r := range reasons {
			tests := skipped[r]
			sort.Strings(tests)
			shown := tests
			if len(shown) > 3 {
				shown = append(shown[:3:3], fmt.Sprintf("%d more", len(tests)-3))
			}
			fmt.Fprintf(out, "  %s\n    %s\n", r, strings.Join(shown, ", "))
		}
	}
	if failed > 0 {
		return 1
	}
	return 0
}

// skipReason is the message t.Skip printed: the last output line of the
// test before its "--- SKIP" line, without the file:line prefix.
func skipReason(lines []string) string {
	for i := len(lines) - 1; i >= 0; i-- {
		l := strings.TrimSpace(lines[i])
		if l == "" || strings.HasPrefix(l, "--- SKIP") || strings.HasPrefix(l, "=== ") {
			continue
		}
		if _, msg, ok := strings.Cut(l, ".go:"); ok {
			if _, m, ok := strings.Cut(msg, ": "); ok {
				return m
			}
		}
		return l
	}
	return "(no reason given)"
}
