//go:build !unix

package uniquecheck_test

import "time"

// cpuTime is not measured here; BenchmarkCheck then reports no CPU time.
func cpuTime() time.Duration { return 0 }
