//go:build runnerpprof

package main

import (
	"net/http"
	_ "net/http/pprof" // registers /debug/pprof on http.DefaultServeMux
	"os"
)

// A profiling build (go build -tags runnerpprof) serves net/http/pprof on
// RUNNER_PPROF_ADDR (loopback only), so that the outside-view benchmark
// can take a CPU profile and an execution trace of a real serve process.
// Release builds do not contain it.
func init() {
	addr := os.Getenv("RUNNER_PPROF_ADDR")
	if addr == "" {
		return
	}
	srv := &http.Server{Addr: addr}
	go func() { _ = srv.ListenAndServe() }() // lives as long as the process
}
