// Package archtest holds no code: its tests check the repository's
// architecture rules (import arrows, package docs) with `go list`.
package archtest
