package testdb

import (
	"bytes"
	"context"
	"crypto/sha256"
	"database/sql"
	"encoding/hex"
	"fmt"
	"net"
	"os"
	"os/exec"
	"os/user"
	"path/filepath"
	"sort"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/racefree/racefree"
	"github.com/racefree/racefree/tenant"
)

// Cluster is a PostgreSQL primary and one asynchronous streaming standby,
// each a server of its own on a free loopback port, made for one test and
// torn down when it ends (t.Cleanup stops every server it started and
// removes their directories). It runs the PostgreSQL binaries found by
// ClusterBin; as root, it runs them as the OS user postgres (initdb
// refuses root). Trust authentication, superuser postgres, database
// postgres. The standby is not synchronous: a commit the primary
// acknowledged may be missing on the standby, which is what a test of a
// failover that loses commits needs.
//
// Primary and Standby name the nodes by role, and Promote swaps them: after
// a failover, Primary is the promoted node and Standby the old primary.
type Cluster struct {
	Primary, Standby *Node

	bin  string
	root string
	as   []string // the command prefix that runs as the postgres OS user; empty when not root
}

// Node is one server of a Cluster.
type Node struct {
	Name string // "a" or "b": the node's own name, which promotion does not change
	Port int
	URL  string // postgres://postgres@127.0.0.1:Port/postgres?sslmode=disable

	c       *Cluster
	dir     string
	running bool
	mu      sync.Mutex
	db      *sql.DB
}

// ClusterBin returns the directory of the PostgreSQL server binaries
// NewCluster runs: $RACEFREE_PG_BIN, else the newest
// /usr/lib/postgresql/<version>/bin (Debian's layout), else the directory
// of initdb on PATH; "" when there are none.
func ClusterBin() string {
	if d := os.Getenv("RACEFREE_PG_BIN"); d != "" {
		return d
	}
	dirs, _ := filepath.Glob("/usr/lib/postgresql/*/bin")
	sort.Slice(dirs, func(i, j int) bool {
		vi, _ := strconv.Atoi(filepath.Base(filepath.Dir(dirs[i])))
		vj, _ := strconv.Atoi(filepath.Base(filepath.Dir(dirs[j])))
		return vi > vj
	})
	for _, d := range dirs {
		if _, err := os.Stat(filepath.Join(d, "initdb")); err == nil {
			return d
		}
	}
	if p, err := exec.LookPath("initdb"); err == nil {
		return filepath.Dir(p)
	}
	return ""
}

// NewCluster starts a primary (wal_level=replica) and a standby made from
// it by pg_basebackup -R, and returns once the standby streams and has
// replayed everything the primary wrote. Without the binaries it skips the
// test with one line (fails it when RACEFREE_REQUIRE_POSTGRES=1).
func NewCluster(t testing.TB) *Cluster {
	t.Helper()
	bin := ClusterBin()
	if bin == "" {
		const msg = "no PostgreSQL server binaries (initdb, pg_ctl, pg_basebackup; set RACEFREE_PG_BIN), so this primary-and-standby test did not run"
		if os.Getenv("RACEFREE_REQUIRE_POSTGRES") == "1" {
			t.Fatal(msg + "; RACEFREE_REQUIRE_POSTGRES=1 requires it")
		}
		t.Skip(msg)
	}
	c := &Cluster{bin: bin}
	root, err := os.MkdirTemp("", "racefree-cluster-")
	if err != nil {
		t.Fatalf("cluster: %v", err)
	}
	c.root = root
	t.Cleanup(func() { _ = os.RemoveAll(root) })
	if os.Geteuid() == 0 {
		u, err := user.Lookup("postgres")
		if err != nil {
			t.Fatalf("cluster: running as root needs the OS user postgres to run the servers: %v", err)
		}
		uid, _ := strconv.Atoi(u.Uid)
		gid, _ := strconv.Atoi(u.Gid)
		if err := os.Chown(root, uid, gid); err != nil {
			t.Fatalf("cluster: %v", err)
		}
		c.as = []string{"runuser", "-u", "postgres", "--"}
	}
	a, b := c.node(t, "a"), c.node(t, "b")
	// Stop every server this test started, even when it fails half-way.
	t.Cleanup(func() {
		for _, n := range []*Node{a, b} {
			n.closeDB()
			if n.running {
				_, _ = c.run(context.Background(), "pg_ctl", "stop", "-D", n.dir, "-m", "immediate", "-w")
			}
		}
	})
	c.initdb(t, a.dir)
	conf := fmt.Sprintf(`
listen_addresses = '127.0.0.1'
unix_socket_directories = '%s'
wal_level = replica
max_wal_senders = 4
wal_keep_size = '256MB'
hot_standby = on
fsync = off
full_page_writes = off
shared_buffers = '16MB'
max_connections = 40
logging_collector = off
`, root)
	c.appendConf(t, a, conf)
	a.Start(t)
	c.must(t, "pg_basebackup", "-D", b.dir, "-h", "127.0.0.1", "-p", strconv.Itoa(a.Port), "-U", "postgres", "-R", "-X", "stream", "--no-sync", "-c", "fast")
	c.appendConf(t, b, fmt.Sprintf("port = %d\n", b.Port))
	b.Start(t)
	c.Primary, c.Standby = a, b
	c.WaitStreaming(t)
	return c
}

// initdb makes a new cluster's data directory at dir: a copy of one that
// initdb made once for these binaries and left under the temporary
// directory (racefree-initdb-…, renamed into place whole, so a test that
// runs beside the first never sees half of it), since initdb's seconds of
// CPU are the same for every cluster. Without that directory (a temporary
// directory the servers' OS user cannot write), initdb runs at dir.
func (c *Cluster) initdb(t testing.TB, dir string) {
	t.Helper()
	args := []string{"-U", "postgres", "-A", "trust", "--no-sync", "--no-instructions", "-E", "UTF8", "--locale", "C"}
	sum := sha256.Sum256([]byte(c.bin))
	cache := filepath.Join(os.TempDir(), "racefree-initdb-"+hex.EncodeToString(sum[:6]))
	script := fmt.Sprintf(`set -e
cache='%[1]s'
if [ ! -f "$cache/data/PG_VERSION" ]; then
	tmp=$(mktemp -d "$cache.XXXXXX")
	'%[2]s' -D "$tmp/data" %[3]s >/dev/null
	mv -T "$tmp" "$cache" 2>/dev/null || rm -rf "$tmp"
fi
cp -a "$cache/data" '%[4]s'
`, cache, filepath.Join(c.bin, "initdb"), strings.Join(args, " "), dir)
	if _, err := c.run(context.Background(), "sh", "-s", script); err == nil {
		return
	}
	_ = os.RemoveAll(dir)
	c.must(t, "initdb", append([]string{"-D", dir}, args...)...)
}

func (c *Cluster) node(t testing.TB, name string) *Node {
	port := freePort(t)
	return &Node{
		Name: name, Port: port, c: c, dir: filepath.Join(c.root, name),
		URL: fmt.Sprintf("postgres://postgres@127.0.0.1:%d/postgres?sslmode=disable", port),
	}
}

func freePort(t testing.TB) int {
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatalf("cluster: free port: %v", err)
	}
	defer l.Close()
	return l.Addr().(*net.TCPAddr).Port
}

// appendConf adds lines to the node's postgresql.conf (later lines win).
func (c *Cluster) appendConf(t testing.TB, n *Node, lines string) {
	t.Helper()
	out, err := c.run(context.Background(), "sh", "-c", "cat >> "+filepath.Join(n.dir, "postgresql.conf"), lines)
	if err != nil {
		t.Fatalf("cluster: postgresql.conf of %s: %v: %s", n.Name, err, out)
	}
}

// run runs a PostgreSQL binary (or sh) as the servers' OS user, with stdin
// when given, and returns its combined output.
func (c *Cluster) run(ctx context.Context, name string, args ...string) (string, error) {
	var stdin string
	if name == "sh" {
		stdin, args = args[len(args)-1], args[:len(args)-1]
	} else {
		name = filepath.Join(c.bin, name)
	}
	argv := append(append(append([]string{}, c.as...), name), args...)
	ctx, cancel := context.WithTimeout(ctx, 60*time.Second)
	defer cancel()
	cmd := exec.CommandContext(ctx, argv[0], argv[1:]...)
	cmd.Dir = c.root
	cmd.Stdin = strings.NewReader(stdin)
	var out bytes.Buffer
	cmd.Stdout, cmd.Stderr = &out, &out
	err := cmd.Run()
	return out.String(), err
}

func (c *Cluster) must(t testing.TB, name string, args ...string) {
	t.Helper()
	if out, err := c.run(context.Background(), name, args...); err != nil {
		t.Fatalf("cluster: %s: %v: %s", name, err, out)
	}
}

// Start starts the node's server (as a standby when it has
// standby.signal) and waits until it accepts connections.
func (n *Node) Start(t testing.TB) {
	t.Helper()
	logFile := filepath.Join(n.c.root, n.Name+".log")
	if out, err := n.c.run(context.Background(), "pg_ctl", "start", "-D", n.dir, "-w", "-t", "60", "-l", logFile,
		"-o", "-p "+strconv.Itoa(n.Port)); err != nil {
		t.Fatalf("cluster: start %s: %v: %s\n%s", n.Name, err, out, n.Log())
	}
	n.running = true
}

// Stop shuts the node's server down cleanly (pg_ctl stop -m fast): a
// primary first sends its standbys everything it wrote.
func (n *Node) Stop(t testing.TB) { n.stop(t, "fast") }

// Kill stops the node's server as a crash would (pg_ctl stop -m
// immediate): no shutdown checkpoint, and nothing more reaches a standby.
func (n *Node) Kill(t testing.TB) { n.stop(t, "immediate") }

func (n *Node) stop(t testing.TB, mode string) {
	t.Helper()
	n.closeDB()
	if out, err := n.c.run(context.Background(), "pg_ctl", "stop", "-D", n.dir, "-m", mode, "-w", "-t", "60"); err != nil {
		t.Fatalf("cluster: stop %s: %v: %s", n.Name, err, out)
	}
	n.running = false
}

// Log returns the node's server log.
func (n *Node) Log() string {
	b, _ := os.ReadFile(filepath.Join(n.c.root, n.Name+".log"))
	return string(b)
}

// DB returns a superuser connection pool to the node, closed when the node
// stops or the test ends.
func (n *Node) DB(t testing.TB) *sql.DB {
	t.Helper()
	n.mu.Lock()
	defer n.mu.Unlock()
	if n.db == nil {
		db, err := sql.Open("pgx", n.URL)
		if err != nil {
			t.Fatalf("cluster: %v", err)
		}
		n.db = db
	}
	return n.db
}

func (n *Node) closeDB() {
	n.mu.Lock()
	defer n.mu.Unlock()
	if n.db != nil {
		_ = n.db.Close()
		n.db = nil
	}
}

// Timeline returns the node's current timeline ID: on a primary the one it
// writes WAL on (pg_walfile_name uses the insertion timeline), on a
// standby the one of the last checkpoint it replayed.
func (n *Node) Timeline(t testing.TB) int64 {
	t.Helper()
	var tl int64
	err := n.DB(t).QueryRowContext(context.Background(), `
SELECT CASE WHEN pg_is_in_recovery() THEN (SELECT timeline_id FROM pg_control_checkpoint())::bigint
            ELSE ('x' || substr(pg_walfile_name(pg_current_wal_lsn()), 1, 8))::bit(32)::bigint END`).Scan(&tl)
	if err != nil {
		t.Fatalf("cluster: timeline of %s: %v", n.Name, err)
	}
	return tl
}

// WaitStreaming waits until the standby streams from the primary and has
// replayed everything the primary had written when it was called (a minute
// at most).
func (c *Cluster) WaitStreaming(t testing.TB) {
	t.Helper()
	var target string
	if err := c.Primary.DB(t).QueryRow(`SELECT pg_current_wal_lsn()::text`).Scan(&target); err != nil {
		t.Fatalf("cluster: %v", err)
	}
	c.waitFor(t, "the standby to stream and replay "+target, func() (bool, error) {
		var streaming, replayed bool
		err := c.Primary.DB(t).QueryRow(`SELECT count(*) > 0 FROM pg_stat_replication WHERE state = 'streaming'`).Scan(&streaming)
		if err != nil || !streaming {
			return false, err
		}
		err = c.Standby.DB(t).QueryRow(`SELECT COALESCE(pg_last_wal_replay_lsn() >= $1::pg_lsn, false)`, target).Scan(&replayed)
		return replayed, err
	})
}

// Promote promotes the standby (pg_ctl promote) and waits until it
// accepts writes; then it swaps Primary and Standby, so that Primary is
// the promoted node. It leaves the old primary as it is: Kill or Stop it
// first to fail over from a lost primary.
func (c *Cluster) Promote(t testing.TB) {
	t.Helper()
	n := c.Standby
	if out, err := c.run(context.Background(), "pg_ctl", "promote", "-D", n.dir, "-w", "-t", "60"); err != nil {
		t.Fatalf("cluster: promote %s: %v: %s\n%s", n.Name, err, out, n.Log())
	}
	c.waitFor(t, n.Name+" to leave recovery", func() (bool, error) {
		var recovering bool
		err := n.DB(t).QueryRow(`SELECT pg_is_in_recovery()`).Scan(&recovering)
		return !recovering, err
	})
	c.Primary, c.Standby = n, c.Primary
}

// FailOverLosing makes the standby miss what lost does on the primary,
// then fails over as if the primary died: it stops the standby cleanly (it
// has replayed what the primary wrote before), runs lost (commits the
// primary acknowledges and no standby ever receives), kills the primary,
// starts the standby again (it cannot reach the primary, so it keeps its
// older state) and promotes it. On return Primary is the promoted node, on
// a timeline above the old primary's, and every commit of lost is gone;
// Standby is the old primary, stopped.
func (c *Cluster) FailOverLosing(t testing.TB, lost func()) {
	t.Helper()
	c.WaitStreaming(t)
	c.Standby.Stop(t)
	lost()
	c.Primary.Kill(t)
	c.Standby.Start(t)
	c.Promote(t)
}

func (c *Cluster) waitFor(t testing.TB, what string, ok func() (bool, error)) {
	t.Helper()
	deadline := time.Now().Add(time.Minute)
	var last error
	for time.Now().Before(deadline) {
		done, err := ok()
		if done && err == nil {
			return
		}
		last = err
		time.Sleep(10 * time.Millisecond)
	}
	t.Fatalf("cluster: waited a minute for %s (last error: %v)\nprimary log:\n%s\nstandby log:\n%s", what, last, c.Primary.Log(), c.Standby.Log())
}

// Open opens the node's database postgres with cfg (nil for defaults),
// migrating it first as Open does, and closes it when the test ends.
func (n *Node) Open(t testing.TB, cfg *racefree.Config) *racefree.DB {
	t.Helper()
	return Open(t, n.URL, cfg)
}

// URLAs returns the node's URL logged in as role.
func (n *Node) URLAs(role string) string {
	return fmt.Sprintf("postgres://%s@127.0.0.1:%d/postgres?sslmode=disable", role, n.Port)
}

// AppRole creates, on the primary, a login role that is neither superuser
// nor BYPASSRLS, granted what [tenant.Grant] grants on owner (the primary's
// database, opened and migrated by Node.Open), and returns its name. The
// standby gets it by replication; it goes with the cluster.
func (c *Cluster) AppRole(t testing.TB, owner *racefree.DB) string {
	t.Helper()
	role := "rf_app_" + randomHex(6)
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancel()
	if _, err := c.Primary.DB(t).ExecContext(ctx, `CREATE ROLE `+role+` LOGIN NOSUPERUSER NOBYPASSRLS NOINHERIT`); err != nil {
		t.Fatalf("cluster: create role: %v", err)
	}
	if err := tenant.Grant(ctx, owner, role); err != nil {
		t.Fatalf("cluster: grant: %v", err)
	}
	return role
}
