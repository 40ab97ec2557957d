//go:build race

package tenanttest

// raceBuild: the runner under attack is built with the race detector when
// the suite is, which also shares the build cache with `go test -race`.
const raceBuild = true
