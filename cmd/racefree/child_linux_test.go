//go:build linux

package main

import (
	"os/exec"
	"syscall"
)

// dieWithTheTest asks the kernel to kill cmd's process when this test
// binary dies. go test's -timeout ends the binary with a panic that runs
// no deferred call, so a serve child whose test hung (a shutdown that
// never ends, under a mutant) would otherwise outlive it and keep its
// port and database.
func dieWithTheTest(cmd *exec.Cmd) {
	cmd.SysProcAttr = &syscall.SysProcAttr{Pdeathsig: syscall.SIGKILL}
}
