//go:build !unix

package main

import (
	"os/exec"
	"syscall"
)

// newGroup does nothing where process groups are not supported.
func newGroup(cmd *exec.Cmd) {}

// signalGroup kills cmd's process, the best that can be done without
// process groups.
func signalGroup(cmd *exec.Cmd, sig syscall.Signal) error {
	return cmd.Process.Kill()
}
