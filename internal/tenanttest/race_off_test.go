//go:build !race

package tenanttest

const raceBuild = false
