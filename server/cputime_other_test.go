//go:build !unix

package server_test

import "time"

// cpuTime is not measured here; BenchmarkClaimOverHTTP then reports no
// CPU time.
func cpuTime() time.Duration { return 0 }
