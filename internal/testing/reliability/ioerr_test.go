//go:build linux

package reliability

import (
	"context"
	"fmt"
	"path/filepath"
	"strconv"
	"testing"

	"github.com/racefree/racefree/internal/testing/iofault"
	"github.com/racefree/racefree/internal/testing/testdb"
	"github.com/racefree/racefree/server"
)

// TestIOErrorOnSQLite makes the writes of a SQLite database's WAL fail,
// as on a failing disk, and checks that a write then answers 503
// unavailable (an outcome unknown: the write may have committed), never a
// 500, and that the server writes again, without a restart, once the
// disk is back.
//
// The fault is real to SQLite: every descriptor this process holds on the
// WAL is replaced (dup3) by one open read-only on the same file, so reads
// still see the WAL and every write the kernel refuses, which SQLite
// reports as SQLITE_IOERR_WRITE. Claims are the subject because an
// acquire on the pool is a statement that commits by itself: a
// transaction's failed COMMIT was judged before this test, such a
// statement's error was not.
func TestIOErrorOnSQLite(t *testing.T) {
	t.Parallel()
	path := filepath.Join(t.TempDir(), "racefree.db")
	in := serveInProcess(t, testdb.Open(t, "sqlite:"+path, nil), server.Options{})
	acquire := func(key, holder string) answer {
		return call(context.Background(), "POST", in.url("/v1/claims/"+key), fmt.Sprintf(`{"holder":%q,"ttl_ms":60000}`, holder))
	}
	if a := acquire("before", "a"); a.code != 200 {
		t.Fatalf("before the fault: %d %v %v", a.code, a.body, a.err)
	}

	restore := iofault.FailWrites(t, path+"-wal")
	refused := 0
	for i := 0; i < 50 && refused < 3; i++ {
		switch a := acquire("during-"+strconv.Itoa(i), "a"); {
		case a.code == 200:
			continue // a connection opened after the fault writes through a descriptor of its own
		case a.code == 503 && a.problem() == "unavailable":
			refused++
		default:
			t.Fatalf("acquire while the WAL's writes fail: %d %v %v; want 503 unavailable", a.code, a.body, a.err)
		}
	}
	restore()
	if refused == 0 {
		t.Fatal("50 acquires while the WAL's writes failed all succeeded")
	}

	if a := acquire("after", "a"); a.code != 200 {
		t.Fatalf("after the fault: %d %v %v", a.code, a.body, a.err)
	}
	if a := acquire("before", "b"); a.code != 409 {
		t.Fatalf("the claim acquired before the fault: another holder got %d %v; want 409, still held", a.code, a.body)
	}
}
