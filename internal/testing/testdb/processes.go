package testdb

import (
	"bytes"
	"context"
	"os"
	"os/exec"
	"strings"
	"sync"
	"testing"
	"time"
)

// Processes runs procs copies of the test binary at once, each with the
// environment plus env(p) and no test selected (-test.run=^$), so that the
// package's TestMain sees its child variable and does one round of work
// instead of running tests. Each child gets two minutes. It fails the test
// when a child fails, with the child's stderr, and returns each child's
// standard output, in order.
func Processes(t testing.TB, procs int, env func(p int) []string) []string {
	t.Helper()
	var wg sync.WaitGroup
	outs := make([]bytes.Buffer, procs)
	errs := make([]string, procs)
	for p := range procs {
		wg.Add(1)
		go func() {
			defer wg.Done()
			ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
			defer cancel()
			cmd := exec.CommandContext(ctx, os.Args[0], "-test.run=^$")
			cmd.Env = append(os.Environ(), env(p)...)
			var stderr bytes.Buffer
			cmd.Stdout, cmd.Stderr = &outs[p], &stderr
			if err := cmd.Run(); err != nil {
				errs[p] = err.Error() + ": " + strings.TrimSpace(stderr.String())
			}
		}()
	}
	wg.Wait()
	out := make([]string, procs)
	for p := range procs {
		if errs[p] != "" {
			t.Fatalf("process %d: %s", p, errs[p])
		}
		out[p] = outs[p].String()
	}
	return out
}
