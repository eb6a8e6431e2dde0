// Package cputime reads the CPU time this process has used, user and
// system, as the kernel counts it (getrusage, in ticks of the kernel's
// clock: read it over many operations). Benchmarks report it beside
// their wall time: on a shared machine a loaded neighbour inflates wall
// time far more than the CPU an operation costs, and on SQLite, which
// runs inside the process, it counts the database's work too.
package cputime

import (
	"testing"
	"time"
)

// PerOp reports the CPU time used since start, divided by ops, as the
// benchmark metric cpu-ns/op; it reports nothing where Process is not
// measured or ops is not positive.
func PerOp(b *testing.B, start time.Duration, ops int) {
	if start <= 0 || ops <= 0 {
		return
	}
	b.ReportMetric(float64(Process()-start)/float64(ops), "cpu-ns/op")
}
