//go:build linux

// Package iofault makes the disk refuse SQLite's writes for a test, for
// real: the process's descriptors on a file are swapped for read-only
// ones, so that the next write(2) fails with EBADF and SQLite reports an
// I/O error (SQLITE_IOERR_WRITE), as it would for a disk that failed.
// Linux only (/proc/self/fd and dup3).
package iofault

import (
	"os"
	"path/filepath"
	"strconv"
	"syscall"
	"testing"
)

// FailWrites replaces every descriptor of this process open on file by
// one open read-only on it, and returns what puts the originals back. A
// descriptor's swap closes it, which drops this process's POSIX locks on
// the file; SQLite takes none on its WAL.
func FailWrites(t testing.TB, file string) (restore func()) {
	t.Helper()
	fds, err := os.ReadDir("/proc/self/fd")
	if err != nil {
		t.Skipf("no /proc/self/fd (%v); the I/O error test did not run", err)
	}
	// Find them all before swapping any: a swap opens descriptors on
	// file, which a single pass over the directory could find again.
	var targets []int
	for _, e := range fds {
		fd, err := strconv.Atoi(e.Name())
		if err != nil {
			continue
		}
		if target, err := os.Readlink(filepath.Join("/proc/self/fd", e.Name())); err == nil && target == file {
			targets = append(targets, fd)
		}
	}
	if len(targets) == 0 {
		t.Fatalf("no descriptor of this process is open on %s", file)
	}
	var saved [][2]int // descriptor, its original's copy
	restore = func() {
		for _, s := range saved {
			if err := syscall.Dup3(s[1], s[0], syscall.O_CLOEXEC); err != nil {
				t.Errorf("restore descriptor %d: %v", s[0], err)
			}
			syscall.Close(s[1])
		}
		saved = nil
	}
	t.Cleanup(restore)
	for _, fd := range targets {
		orig, err := syscall.Dup(fd)
		if err != nil {
			t.Fatal(err)
		}
		saved = append(saved, [2]int{fd, orig})
		ro, err := syscall.Open(file, syscall.O_RDONLY|syscall.O_CLOEXEC, 0)
		if err != nil {
			t.Fatal(err)
		}
		err = syscall.Dup3(ro, fd, syscall.O_CLOEXEC)
		syscall.Close(ro)
		if err != nil {
			t.Fatal(err)
		}
	}
	return restore
}
