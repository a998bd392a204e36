//go:build pprof

package main

import (
	"net/http"
	_ "net/http/pprof" // profiling endpoints, in builds with -tags pprof only
	"os"
	"runtime"
	"strconv"
)

// Builds with -tags pprof serve Go's profiles on UNITLEASE_PPROF (e.g.
// 127.0.0.1:6060), for the scale benchmark's investigations;
// UNITLEASE_MEMPROFILERATE sets runtime.MemProfileRate (1: every
// allocation is in the heap profile).
func init() {
	if rate, err := strconv.Atoi(os.Getenv("UNITLEASE_MEMPROFILERATE")); err == nil {
		runtime.MemProfileRate = rate
	}
	if addr := os.Getenv("UNITLEASE_PPROF"); addr != "" {
		go func() { _ = http.ListenAndServe(addr, nil) }()
	}
}
