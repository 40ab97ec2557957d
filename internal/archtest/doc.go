// Package archtest holds no code: its tests check the repository's
// architecture rules with `go list`: import arrows (implementations are
// imported only by the wiring, never by a sibling), a layer for every
// package and every import going down them, the table of the module's
// own import arrows (imports.txt) and of what the runner binary links
// from outside it (runner-deps.txt), and package docs. A new import or
// dependency is a visible diff of those tables: `go generate
// ./internal/archtest` (or `go test ./internal/archtest -update`)
// rewrites them.
package archtest

//go:generate go test -run ^(TestImportTable|TestRunnerDeps)$ -update
