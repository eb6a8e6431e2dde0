//go:build unix

package main

import (
	"os/exec"
	"syscall"
)

// newGroup makes cmd the leader of a new process group, so that go test and
// the test binaries it starts can be signalled together.
func newGroup(cmd *exec.Cmd) {
	cmd.SysProcAttr = &syscall.SysProcAttr{Setpgid: true}
}

// signalGroup sends sig to the process group that cmd leads.
func signalGroup(cmd *exec.Cmd, sig syscall.Signal) error {
	return syscall.Kill(-cmd.Process.Pid, sig)
}
