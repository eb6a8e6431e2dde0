package reliability

import (
	"context"
	"errors"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"syscall"
	"testing"

	"github.com/racefree/racefree/internal/testing/testdb"
	"github.com/racefree/racefree/server"
)

// TestFullDiskOnSQLite serves a SQLite database on a small tmpfs, fills
// the filesystem, and checks that writes then fail with 503 unavailable
// (not a 500, and nothing half-written), that everything acknowledged
// before is still there, and that the server writes again, without a
// restart, once space returns. It needs root to mount the tmpfs and skips
// with a reason where it cannot.
func TestFullDiskOnSQLite(t *testing.T) {
	t.Parallel()
	dir := t.TempDir()
	if os.Geteuid() != 0 {
		t.Skip("mounting a tmpfs needs root; the full-disk test did not run")
	}
	if out, err := exec.Command("mount", "-t", "tmpfs", "-o", "size=2m", "tmpfs", dir).CombinedOutput(); err != nil {
		t.Skipf("cannot mount a tmpfs (%v: %s); the full-disk test did not run", err, out)
	}
	t.Cleanup(func() {
		if out, err := exec.Command("umount", dir).CombinedOutput(); err != nil {
			t.Errorf("umount %s: %v: %s", dir, err, out)
		}
	})
	in := serveInProcess(t, testdb.Open(t, "sqlite:"+filepath.Join(dir, "racefree.db"), nil), server.Options{})
	var acked []int64
	next := func(key string) answer {
		return call(context.Background(), "POST", in.url("/v1/sequences/acme/invoice/next"), `{"n":1}`, "Idempotency-Key", `"`+key+`"`)
	}
	for i := range 5 {
		a := next(fmt.Sprintf("before-%d", i))
		if a.code != 200 {
			t.Fatalf("before the disk filled: %d %v", a.code, a.body)
		}
		acked = append(acked, a.int("first"))
	}

	// Fill the filesystem to the last byte.
	filler := filepath.Join(dir, "filler")
	fill, err := os.Create(filler)
	if err != nil {
		t.Fatal(err)
	}
	block := make([]byte, 64<<10)
	for n := len(block); n > 0; {
		if _, err := fill.Write(block[:n]); err != nil {
			if !errors.Is(err, syscall.ENOSPC) {
				t.Fatal(err)
			}
			n /= 2
		}
	}
	fill.Close()

	// Writes fail as unavailable; enough of them to need new pages.
	refused := 0
	for i := range 200 {
		a := call(context.Background(), "POST", in.url("/v1/outbox"), fmt.Sprintf(`{"topic":"t","key":"k","payload_base64":"%0400d"}`, i), "Idempotency-Key", fmt.Sprintf(`"full-%d"`, i))
		switch {
		case a.code == 200:
			continue // a page still had room
		case a.code == 503 && a.problem() == "unavailable":
			refused++
		default:
			t.Fatalf("write on a full disk: %d %v; want 503 unavailable", a.code, a.body)
		}
		if refused == 3 {
			break
		}
	}
	if refused == 0 {
		t.Fatal("200 writes of 400 bytes all fit on a full 2 MiB filesystem")
	}

	// Space returns: the server writes again, and what it acknowledged
	// before is there.
	if err := os.Remove(filler); err != nil {
		t.Fatal(err)
	}
	a := next("after")
	if a.code != 200 || a.int("first") != acked[len(acked)-1]+1 {
		t.Fatalf("after space returned: %d %v; want number %d", a.code, a.body, acked[len(acked)-1]+1)
	}
	for i, n := range acked {
		if a := next(fmt.Sprintf("before-%d", i)); a.code != 200 || !a.replayed || a.int("first") != n {
			t.Errorf("acknowledged number %d: its key now answers %d %v", n, a.code, a.body)
		}
	}
}
