//go:build linux

package outbox_test

import (
	"os/exec"
	"syscall"
)

// dieWithTheTest asks the kernel to kill cmd's process when this test
// binary dies: go test's -timeout ends it with a panic that runs no
// cleanup, and a relay child would outlive it, still claiming.
func dieWithTheTest(cmd *exec.Cmd) {
	cmd.SysProcAttr = &syscall.SysProcAttr{Pdeathsig: syscall.SIGKILL}
}
