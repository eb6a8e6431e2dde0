package reliability

import (
	"context"
	"database/sql"
	"encoding/json"
	"fmt"
	"net"
	"os"
	"os/exec"
	"os/user"
	"path/filepath"
	"regexp"
	"sort"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/racefree/racefree/doctor"
	"github.com/racefree/racefree/internal/testing/testdb"
)

// TestFailoverUnderLoad builds a pg_auto_failover cluster on loopback
// ports (a monitor, a primary and a standby, Debian's
// postgresql-15-auto-failover and pg-auto-failover-cli), serves it with
// racefree serve on a multi-host DSN (target_session_attrs=read-write),
// drives claims, sequence numbers and audit entries from 3 clients, and
// fails over under that load: a controlled failover (pg_autoctl perform
// failover) and the primary node killed (SIGKILL to its postmaster and
// its pg_autoctl keeper, as if its machine died; the keeper is started
// again once the standby took over, and the old primary rejoins as the
// new standby). First in synchronous mode (pg_auto_failover's default: the
// standby is in the replication quorum, so a commit waits for it), then
// the same in strict mode (a second serve with
// --require-synchronous-replication: while the new primary has no
// synchronous standby, its writes are refused 503 not-durable instead of
// committed locally), then in asynchronous mode (both nodes out of the
// quorum: commits do not wait).
//
// Every acknowledged answer is checked: in every mode a claim fence is
// never acknowledged to two holders and never goes backwards (fences carry
// the timeline's floor); in synchronous and strict mode no acknowledged
// sequence number or audit entry is lost; in asynchronous mode the
// acknowledged ones a failover lost are counted and printed, not failed on
// (they are the expected cost of not waiting for the standby). Every
// answer while no primary is reachable is a 503 with Retry-After, never a
// 500 (not-durable only from the strict server), and the test prints how
// long each failover's 503 window lasted. After each mode's faults,
// racefree doctor must say what the replication is: nothing in
// synchronous and strict mode, no-standby-waits and strict-refuses-writes
// in asynchronous mode.
//
// Without pg_autoctl it skips with one line (fails with
// RACEFREE_REQUIRE_POSTGRES=1). The short mode fails over once each way
// per mode (strict mode: the node killed only); RACEFREE_LONG=1 does each
// way three times in every mode, and also SIGKILLs the
// primary's postmaster alone (its keeper restarts it in place, or the
// monitor fails over, whichever comes first).
func TestFailoverUnderLoad(t *testing.T) {
	t.Parallel()
	rounds := testdb.Scale(1, 3)
	kinds := []string{"controlled", "node killed"}
	if testdb.Long() {
		kinds = append(kinds, "postmaster killed")
	}
	c := newAutoFailover(t)
	keys := auditKeyring(t)
	plain := startServe(t, c.dsn(), keys, "--request-timeout", "2s", "--write-timeout", "3s")
	strict := startServe(t, c.dsn(), keys, "--request-timeout", "2s", "--write-timeout", "3s", "--require-synchronous-replication")

	var all []faultWindow
	for _, mode := range []string{"sync", "strict", "async"} {
		in := plain
		if mode == "strict" {
			in = strict
		}
		if mode == "async" {
			c.asynchronous(t)
		}
		l := &haLedger{mode: mode}
		kinds := kinds
		if mode == "strict" && !testdb.Long() {
			// Strict mode differs where the new primary has no
			// synchronous standby for a while: after a node is lost.
			kinds = []string{"node killed"}
		}
		stop := make(chan struct{})
		var wg sync.WaitGroup
		for client := range 3 {
			wg.Add(1)
			go func() {
				defer wg.Done()
				for i := 0; ; i++ {
					select {
					case <-stop:
						if i >= 6 {
							return
						}
					default:
					}
					l.op(t, in, client, i)
				}
			}()
		}
		start := time.Now()
		l.waitOps(t, 30) // load running before the first fault
		for r := range rounds {
			for _, kind := range kinds {
				from := c.waitStable(t)
				at := time.Now()
				var to string
				switch kind {
				case "controlled":
					c.performFailover(t)
					to = c.waitPrimary(t, from)
				case "node killed":
					c.killNode(t, from)
					to = c.waitPrimary(t, from)
					c.startNode(t, from) // rejoins as the standby
				case "postmaster killed":
					c.killPostmaster(t, from)
				}
				if p := c.waitStable(t); to == "" {
					to = p
				}
				l.waitOps(t, 30) // load acknowledged again after the fault
				all = append(all, faultWindow{mode: mode, kind: kind, round: r, at: at, from: from, to: to})
			}
		}
		close(stop)
		wg.Wait()
		w := l.windows(all, mode)
		for _, f := range w {
			t.Logf("%s, %s failover %d at %s (%s to %s): 503 for %v (%d answers 503), first success %v after the fault",
				mode, f.kind, f.round+1, f.at.Format("15:04:05.000"), f.from, f.to, f.window.Round(time.Millisecond), f.n503, f.recovered.Round(time.Millisecond))
		}
		failed := t.Failed()
		if mode == "sync" {
			l.demotedUnwaited = c.demotedUnwaited(t)
		}
		l.check(t, in, time.Since(start))
		if !failed && t.Failed() {
			// What pg_auto_failover did meanwhile, to tell a loss of
			// racefree's from one its replication allowed (a primary
			// that stopped waiting for its standby: wait_primary).
			t.Logf("%s: the monitor's events of the run:\n%s", mode, c.events(200))
		}
		c.doctorSays(t, mode)
	}
	for _, in := range []*instance{plain, strict} {
		if in.exited() {
			t.Errorf("racefree serve exited during the failovers:\n%s", in.log())
		}
	}
	var ws []time.Duration
	for _, f := range all {
		ws = append(ws, f.window)
	}
	sort.Slice(ws, func(i, j int) bool { return ws[i] < ws[j] })
	t.Logf("cluster built in %v; %d failovers; 503 windows min %v, median %v, max %v",
		c.built.Round(100*time.Millisecond), len(ws), ws[0].Round(time.Millisecond), ws[len(ws)/2].Round(time.Millisecond), ws[len(ws)-1].Round(time.Millisecond))
}

// exited reports whether the serve process has exited.
func (in *instance) exited() bool {
	in.mu.Lock()
	done := in.done
	in.mu.Unlock()
	select {
	case <-done:
		return true
	default:
		return false
	}
}

// faultWindow is one fault injected under load and what the clients saw.
type faultWindow struct {
	mode, kind string
	round      int
	at         time.Time // when the fault was injected
	from, to   string    // the primary before and after

	n503      int           // 503 answers after at, before the next fault
	window    time.Duration // from the first 503 to the first success after the last one
	recovered time.Duration // from at to that first success
}

// haAck is one acknowledged sequence number or audit entry.
type haAck struct {
	n        int64 // the number, or the entry's seq
	key      string
	replayed bool // the answer replayed an earlier outcome of its key
	acked    time.Time
}

func (a haAck) String() string {
	return fmt.Sprintf("%d (key %s, replayed %v, acknowledged at %s)", a.n, a.key, a.replayed, a.acked.Format("15:04:05.000"))
}

// haEvent is one answer a client got.
type haEvent struct {
	at   time.Time
	code int
}

// haLedger is the log of one mode's load: every acknowledged answer, and
// every answer's time and status for the 503 windows.
type haLedger struct {
	mode string

	mu         sync.Mutex
	ops        int
	claims     []claimAck
	seqs       []haAck
	audits     []haAck // key: the entry's subject
	events     []haEvent
	unexpected []string
	// demotedUnwaited are the times in which a primary committed without
	// waiting for its standby and was demoted afterwards, read in
	// synchronous mode only (strict mode refuses such writes, and
	// asynchronous mode counts every loss without failing): what it
	// acknowledged then, a failover may lose in synchronous mode too, as
	// the docs say of every mode but strict.
	demotedUnwaited []haWindow
	// notDurable counts strict mode's refusals (503 not-durable): while
	// the new primary has no synchronous standby (pg_auto_failover's
	// wait_primary, until the old primary rejoins), strict mode refuses
	// writes instead of committing them locally.
	notDurable int
}

// op sends one operation (a claim acquire, a sequence number, an audit
// entry, in turn) with its own Idempotency-Key until its answer is
// definitive, and logs it.
func (l *haLedger) op(t testing.TB, in *instance, client, i int) {
	key := fmt.Sprintf("%s-c%d-op%d", l.mode, client, i)
	holder := fmt.Sprintf("client-%d", client)
	switch i % 3 {
	case 0:
		lease := fmt.Sprintf("%s-lease-%d", l.mode, i/3%leaseKeys)
		sent := time.Now()
		a := l.settle(t, "POST", in.url("/v1/claims/"+lease), fmt.Sprintf(`{"holder":%q,"ttl_ms":%d}`, holder, leaseTTLMs), key)
		l.mu.Lock()
		defer l.mu.Unlock()
		switch {
		case a.code == 200:
			l.claims = append(l.claims, claimAck{lease, holder, a.int("fence"), sent, time.Now()})
		case a.problem() != "held":
			l.unexpected = append(l.unexpected, fmt.Sprintf("acquire %s: %d %v %v", lease, a.code, a.body, a.err))
			return
		}
	case 1:
		a := l.settle(t, "POST", in.url("/v1/sequences/"+l.mode+"/invoice/next"), `{"n":1}`, key)
		l.mu.Lock()
		defer l.mu.Unlock()
		if a.code != 200 {
			l.unexpected = append(l.unexpected, fmt.Sprintf("sequence next: %d %v %v", a.code, a.body, a.err))
			return
		}
		l.seqs = append(l.seqs, haAck{a.int("first"), key, a.replayed, time.Now()})
	case 2:
		a := l.settle(t, "POST", in.url("/v1/audit"), fmt.Sprintf(`{"scope":%q,"actor":%q,"action":"op","subject":%q}`, l.mode, holder, key), key)
		l.mu.Lock()
		defer l.mu.Unlock()
		if a.code != 200 {
			l.unexpected = append(l.unexpected, fmt.Sprintf("audit append: %d %v %v", a.code, a.body, a.err))
			return
		}
		l.audits = append(l.audits, haAck{a.int("seq"), key, a.replayed, time.Now()})
	}
	l.ops++
}

// settle is settle's loop with every answer logged: retried with the same
// key until definitive, for up to 90 seconds (a failover after a kill
// takes several). A 500, or a 503 without Retry-After, is an error.
func (l *haLedger) settle(t testing.TB, method, url, body, key string) answer {
	ctx, cancel := context.WithTimeout(context.Background(), 90*time.Second)
	defer cancel()
	for {
		a := call(ctx, method, url, body, "Idempotency-Key", strconv.Quote(key))
		l.mu.Lock()
		l.events = append(l.events, haEvent{time.Now(), a.code})
		l.mu.Unlock()
		switch {
		case a.code == 503 && a.retryAfter == "":
			t.Errorf("%s %s (key %s): 503 without Retry-After: %v", method, url, key, a.body)
		case a.code >= 500 && a.code != 503:
			t.Errorf("%s %s (key %s): %d %v; while no primary is reachable the answer is 503", method, url, key, a.code, a.body)
		case a.code == 503 && a.problem() == "not-durable":
			if l.mode != "strict" {
				t.Errorf("%s %s (key %s): 503 not-durable from a server not in strict mode: %v", method, url, key, a.body)
			}
			l.mu.Lock()
			l.notDurable++
			l.mu.Unlock()
		}
		if a.definitive() {
			return a
		}
		if ctx.Err() != nil {
			t.Errorf("%s %s (key %s) never settled in 90s: last %d %v %v", method, url, key, a.code, a.body, a.err)
			return a
		}
		time.Sleep(10 * time.Millisecond)
	}
}

// waitOps waits until n more operations are acknowledged (two minutes at
// most).
func (l *haLedger) waitOps(t testing.TB, n int) {
	t.Helper()
	l.mu.Lock()
	target := l.ops + n
	l.mu.Unlock()
	for deadline := time.Now().Add(2 * time.Minute); ; time.Sleep(20 * time.Millisecond) {
		l.mu.Lock()
		ops := l.ops
		l.mu.Unlock()
		if ops >= target {
			return
		}
		if time.Now().After(deadline) {
			t.Fatalf("%s: %d operations acknowledged, none more in two minutes (want %d)", l.mode, ops, target)
		}
	}
}

// windows fills in, for this mode's faults, the 503 window each one
// caused: from its first 503 to the first success after its last 503,
// among the answers before the next fault.
func (l *haLedger) windows(all []faultWindow, mode string) []faultWindow {
	l.mu.Lock()
	defer l.mu.Unlock()
	ev := append([]haEvent(nil), l.events...)
	sort.Slice(ev, func(i, j int) bool { return ev[i].at.Before(ev[j].at) })
	var out []faultWindow
	for i := range all {
		f := &all[i]
		if f.mode != mode {
			continue
		}
		end := time.Now()
		if i+1 < len(all) && all[i+1].mode == mode {
			end = all[i+1].at
		}
		var first, last time.Time
		for _, e := range ev {
			if e.at.Before(f.at) || !e.at.Before(end) || e.code != 503 {
				continue
			}
			if first.IsZero() {
				first = e.at
			}
			last = e.at
			f.n503++
		}
		for _, e := range ev {
			if e.at.After(last) && e.at.After(f.at) && e.code != 0 && e.code < 500 {
				if !first.IsZero() {
					f.window = e.at.Sub(first)
				}
				f.recovered = e.at.Sub(f.at)
				break
			}
		}
		out = append(out, *f)
	}
	return out
}

// check checks the mode's acknowledged answers against each other and
// against what the database holds at the end (through serve).
func (l *haLedger) check(t *testing.T, in *instance, took time.Duration) {
	t.Helper()
	ctx := context.Background()
	for _, u := range l.unexpected {
		t.Errorf("%s: unexpected answer: %s", l.mode, u)
	}

	// Claims, in both modes: one holder per fence, fences never backwards.
	repeated, backwards := 0, 0
	byFence := map[string]string{}
	for _, a := range l.claims {
		fk := fmt.Sprintf("%s#%d", a.key, a.fence)
		if h, ok := byFence[fk]; ok && h != a.holder {
			repeated++
			t.Errorf("%s: %s fence %d acknowledged to %s and to %s", l.mode, a.key, a.fence, h, a.holder)
		}
		byFence[fk] = a.holder
		for _, b := range l.claims {
			if b.key == a.key && b.sent.After(a.acked) && b.fence < a.fence {
				backwards++
				t.Errorf("%s: %s fence went backwards: %d acknowledged, then %d", l.mode, a.key, a.fence, b.fence)
			}
		}
	}

	// Sequence numbers: an acknowledged number is lost when a failover
	// dropped its commit; the new primary then hands it out again (a
	// duplicate) or has not reached it yet (above the counter).
	next := settleNext(t, in, l.mode)
	// Of a number acknowledged more than once, every acknowledgement but
	// the last (the one the database holds) was lost.
	last := map[int64]int{}
	for i, a := range l.seqs {
		last[a.n] = i
	}
	lostSeqs, lostReplays, lostUnwaited := 0, 0, 0
	for i, a := range l.seqs {
		if last[a.n] != i || a.n >= next {
			if w, ok := l.unwaited(a); ok {
				lostUnwaited++
				t.Logf("%s: acknowledged sequence number lost, committed while %s: %v", l.mode, w, a)
				continue
			}
			lostSeqs++
			if a.replayed {
				lostReplays++
			}
			t.Logf("%s: acknowledged sequence number lost (handed out again, or above the counter %d): %v", l.mode, next, a)
		}
	}

	// Audit entries: an acknowledged entry is lost when the chain at the
	// end does not hold it at its seq.
	listed := map[int64]string{}
	for after := "0"; ; {
		a := call(ctx, "GET", in.url("/v1/audit?scope="+l.mode+"&limit=1000&after="+after), "")
		entries, _ := a.body["entries"].([]any)
		if a.code != 200 {
			t.Fatalf("%s: audit list: %d %v %v", l.mode, a.code, a.body, a.err)
		}
		if len(entries) == 0 {
			break
		}
		for _, e := range entries {
			m, _ := e.(map[string]any)
			s, _ := m["seq"].(float64)
			listed[int64(s)], _ = m["subject"].(string)
		}
		after, _ = a.body["next"].(string)
	}
	lostAudits := 0
	for _, a := range l.audits {
		if listed[a.n] != a.key {
			if w, ok := l.unwaited(a); ok {
				lostUnwaited++
				t.Logf("%s: audit entry acknowledged and lost, committed while %s: %v; the chain holds %q there", l.mode, w, a, listed[a.n])
				continue
			}
			lostAudits++
			if a.replayed {
				lostReplays++
			}
			t.Logf("%s: audit entry acknowledged and lost: %v; the chain holds %q there", l.mode, a, listed[a.n])
		}
	}
	if a := call(ctx, "GET", in.url("/v1/audit/verify?scope="+l.mode), ""); a.code != 200 || a.body["intact"] != true {
		t.Errorf("%s: audit verify at the end: %d %v", l.mode, a.code, a.body)
	}

	t.Logf("%s: %d operations acknowledged in %v (%d claim tenures, %d sequence numbers, %d audit entries); fences repeated %d, backwards %d; acknowledged sequence numbers lost %d, audit entries lost %d",
		l.mode, l.ops, took.Round(time.Millisecond), len(l.claims), len(l.seqs), len(l.audits), repeated, backwards, lostSeqs, lostAudits)
	if l.mode == "strict" {
		t.Logf("strict: %d writes refused 503 not-durable (no synchronous standby at the time)", l.notDurable)
	}
	if l.mode != "async" {
		// A replay of an Idempotency-Key waits for the standby too
		// (TestReplayWaitsForTheSynchronousStandby), so every loss fails,
		// replays included.
		if lostSeqs+lostAudits > 0 {
			t.Errorf("%s: a synchronous standby lost %d acknowledged sequence numbers and %d audit entries (%d of them replays); want none", l.mode, lostSeqs, lostAudits, lostReplays)
		}
		if lostUnwaited > 0 {
			// Numbers that came again after such a loss are the loss
			// itself, each acknowledgement checked above.
			t.Logf("%s: %d acknowledged writes lost that a primary committed without waiting for its standby, then demoted (pg_auto_failover's wait_primary): the cost of every mode but strict", l.mode, lostUnwaited)
			return
		}
		var sorted []int64
		for _, a := range l.seqs {
			sorted = append(sorted, a.n)
		}
		sort.Slice(sorted, func(i, j int) bool { return sorted[i] < sorted[j] })
		for i, n := range sorted {
			if n != int64(i+1) {
				t.Errorf("%s: acknowledged sequence numbers %v: want 1..%d", l.mode, sorted, len(sorted))
				break
			}
		}
		if next != int64(len(l.seqs)+1) {
			t.Errorf("%s: next number %d after %d acknowledged", l.mode, next, len(l.seqs))
		}
	}
}

// doctorSays checks, once the formation is stable after a mode's faults,
// that racefree doctor (with --require-synchronous-replication) reports
// what the mode's replication is: with the standby in the quorum (sync,
// strict) no finding about it and strict mode's writes allowed; with both
// nodes out of it (async) no-standby-waits, and strict-refuses-writes. It
// polls, since pg_auto_failover sets synchronous_standby_names and the
// standby reports its sync_state a moment after the monitor says stable.
func (c *autoFailover) doctorSays(t *testing.T, mode string) {
	t.Helper()
	want := map[string]bool{doctor.NoStandbyWaits: false, doctor.SyncStandbyNotStreaming: false, doctor.StrictRefusesWrites: false}
	if mode == "async" {
		want[doctor.NoStandbyWaits] = true
		want[doctor.StrictRefusesWrites] = true
	}
	var found map[string]bool
	c.waitFor(t, fmt.Sprintf("racefree doctor to report %v (%s mode)", want, mode), func() (bool, error) {
		out, err := exec.Command(racefreeBin(t), "doctor", "--db", c.dsn(), "--format", "json", "--require-synchronous-replication").Output()
		if ee, ok := err.(*exec.ExitError); ok && ee.ExitCode() == 1 {
			err = nil // findings
		}
		if err != nil {
			return false, fmt.Errorf("racefree doctor: %w", err)
		}
		var findings []struct {
			Code string `json:"code"`
		}
		if err := json.Unmarshal(out, &findings); err != nil {
			return false, fmt.Errorf("racefree doctor: %w: %s", err, out)
		}
		found = map[string]bool{}
		for _, f := range findings {
			found[f.Code] = true
		}
		for code, w := range want {
			if found[code] != w {
				return false, nil
			}
		}
		return true, nil
	})
	t.Logf("%s: racefree doctor reports %v", mode, found)
}

// settleNext takes the mode's next sequence number.
func settleNext(t testing.TB, in *instance, mode string) int64 {
	a := settle(t, "POST", in.url("/v1/sequences/"+mode+"/invoice/next"), `{"n":1}`, mode+"-final")
	if a.code != 200 {
		t.Fatalf("%s: final next: %d %v", mode, a.code, a.body)
	}
	return a.int("first")
}

// autoFailover is a pg_auto_failover formation made for one test: a
// monitor and two nodes, a and b, each a PostgreSQL server on a loopback
// port run by its pg_autoctl keeper (as the OS user postgres when the
// test runs as root), all in a temporary directory, killed and removed
// when the test ends.
type autoFailover struct {
	bin, root string
	cred      *syscall.Credential
	monitor   int // port
	ports     map[string]int
	built     time.Duration

	mu    sync.Mutex
	procs map[string]*exec.Cmd // the pg_autoctl processes, each leading its process group
	done  map[string]chan struct{}
	mon   *sql.DB
}

// newAutoFailover builds the formation and returns once a is the primary
// and b its streaming standby. Without pg_autoctl or PostgreSQL's server
// binaries it skips the test with one line (fails it when
// RACEFREE_REQUIRE_POSTGRES=1).
func newAutoFailover(t *testing.T) *autoFailover {
	t.Helper()
	start := time.Now()
	_, err := exec.LookPath("pg_autoctl")
	bin := testdb.ClusterBin()
	if err != nil || bin == "" {
		const msg = "no pg_autoctl or PostgreSQL server binaries (apt-get install postgresql-15-auto-failover pg-auto-failover-cli), so the failover test did not run"
		if os.Getenv("RACEFREE_REQUIRE_POSTGRES") == "1" {
			t.Fatal(msg + "; RACEFREE_REQUIRE_POSTGRES=1 requires it")
		}
		t.Skip(msg)
	}
	root, err := os.MkdirTemp("", "racefree-autofailover-")
	if err != nil {
		t.Fatal(err)
	}
	c := &autoFailover{bin: bin, root: root, ports: map[string]int{}, procs: map[string]*exec.Cmd{}, done: map[string]chan struct{}{}}
	t.Cleanup(func() { _ = os.RemoveAll(root) })
	if os.Geteuid() == 0 {
		u, err := user.Lookup("postgres")
		if err != nil {
			t.Fatalf("autofailover: running as root needs the OS user postgres to run the servers: %v", err)
		}
		uid, _ := strconv.Atoi(u.Uid)
		gid, _ := strconv.Atoi(u.Gid)
		if err := os.Chown(root, uid, gid); err != nil {
			t.Fatal(err)
		}
		c.cred = &syscall.Credential{Uid: uint32(uid), Gid: uint32(gid)}
	}
	t.Cleanup(c.stopAll)
	c.monitor = freePort(t)
	c.ports["a"], c.ports["b"] = freePort(t), freePort(t)

	c.start(t, "monitor", "create", "monitor", "--pgdata", c.pgdata("monitor"), "--pgport", strconv.Itoa(c.monitor),
		"--hostname", "127.0.0.1", "--auth", "trust", "--no-ssl", "--pgctl", filepath.Join(bin, "pg_ctl"), "--run")
	mon, err := sql.Open("pgx", fmt.Sprintf("postgres://postgres@127.0.0.1:%d/pg_auto_failover?sslmode=disable&connect_timeout=2", c.monitor))
	if err != nil {
		t.Fatal(err)
	}
	c.mon = mon
	c.waitFor(t, "the monitor", func() (bool, error) {
		var n int
		err := mon.QueryRow(`SELECT count(*) FROM pgautofailover.formation`).Scan(&n)
		return err == nil && n > 0, nil
	})
	// Notice a dead node within seconds rather than pg_auto_failover's
	// production defaults (20 s unhealthy, 30 s for a lost primary to
	// demote itself), so that a failover after a kill fits the test.
	for _, s := range []string{
		"pgautofailover.health_check_period = 1000",
		"pgautofailover.health_check_timeout = 1000",
		"pgautofailover.health_check_max_retries = 1",
		"pgautofailover.health_check_retry_delay = 500",
		"pgautofailover.node_considered_unhealthy_timeout = 3000",
		"pgautofailover.primary_demote_timeout = 3000",
	} {
		if _, err := mon.Exec(`ALTER SYSTEM SET ` + s); err != nil {
			t.Fatalf("autofailover: %s: %v", s, err)
		}
	}
	if _, err := mon.Exec(`SELECT pg_reload_conf()`); err != nil {
		t.Fatal(err)
	}
	c.startNode(t, "a", c.createArgs("a")...)
	c.waitFor(t, "a to be the primary", func() (bool, error) {
		var n int
		err := mon.QueryRow(`SELECT count(*) FROM pgautofailover.node WHERE nodename = 'a' AND reportedstate = 'single'`).Scan(&n)
		return err == nil && n == 1, nil
	})
	c.startNode(t, "b", c.createArgs("b")...)
	c.waitStable(t)
	c.built = time.Since(start)
	t.Logf("pg_auto_failover formation built in %v: monitor on %d, a on %d, b on %d", c.built.Round(100*time.Millisecond), c.monitor, c.ports["a"], c.ports["b"])
	return c
}

func freePort(t testing.TB) int {
	t.Helper()
	_, p, _ := net.SplitHostPort(freeAddr(t))
	n, _ := strconv.Atoi(p)
	return n
}

func (c *autoFailover) pgdata(name string) string { return filepath.Join(c.root, name) }

func (c *autoFailover) monitorURI() string {
	return fmt.Sprintf("postgres://autoctl_node@127.0.0.1:%d/pg_auto_failover?sslmode=disable", c.monitor)
}

// dsn is the multi-host DSN racefree serves: both nodes, the writable one
// chosen at connect time, each tried for 2 seconds at most.
func (c *autoFailover) dsn() string {
	return fmt.Sprintf("postgres://postgres@127.0.0.1:%d,127.0.0.1:%d/postgres?sslmode=disable&target_session_attrs=read-write&connect_timeout=2",
		c.ports["a"], c.ports["b"])
}

func (c *autoFailover) createArgs(name string) []string {
	return []string{"create", "postgres", "--pgdata", c.pgdata(name), "--pgport", strconv.Itoa(c.ports[name]),
		"--hostname", "127.0.0.1", "--name", name, "--auth", "trust", "--no-ssl",
		"--monitor", c.monitorURI(), "--pgctl", filepath.Join(c.bin, "pg_ctl"), "--run"}
}

// env is the environment of every pg_autoctl process: its configuration
// and state files under the test's directory, and the PostgreSQL binaries
// first on PATH.
func (c *autoFailover) env() []string {
	return []string{
		"HOME=" + c.root,
		"XDG_CONFIG_HOME=" + filepath.Join(c.root, "config"),
		"XDG_DATA_HOME=" + filepath.Join(c.root, "data"),
		"PATH=" + c.bin + ":/usr/bin:/bin",
		"LANG=C",
	}
}

func (c *autoFailover) command(args ...string) *exec.Cmd {
	cmd := exec.Command("pg_autoctl", args...)
	cmd.Dir = c.root
	cmd.Env = c.env()
	cmd.SysProcAttr = &syscall.SysProcAttr{Setpgid: true, Credential: c.cred}
	return cmd
}

// start starts a long-running pg_autoctl process (create … --run, or run)
// as the node's keeper, its output appended to <root>/<name>.log.
func (c *autoFailover) start(t testing.TB, name string, args ...string) {
	t.Helper()
	f, err := os.OpenFile(filepath.Join(c.root, name+".log"), os.O_CREATE|os.O_APPEND|os.O_WRONLY, 0o644)
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	cmd := c.command(args...)
	cmd.Stdout, cmd.Stderr = f, f
	if err := cmd.Start(); err != nil {
		t.Fatalf("autofailover: pg_autoctl %s: %v", strings.Join(args, " "), err)
	}
	done := make(chan struct{})
	go func() { _ = cmd.Wait(); close(done) }()
	c.mu.Lock()
	c.procs[name], c.done[name] = cmd, done
	c.mu.Unlock()
}

// startNode starts the node's keeper: with args when given (its creation),
// else pg_autoctl run on its existing PGDATA.
func (c *autoFailover) startNode(t testing.TB, name string, args ...string) {
	t.Helper()
	if len(args) == 0 {
		args = []string{"run", "--pgdata", c.pgdata(name)}
	}
	c.start(t, name, args...)
}

// killNode SIGKILLs the node's postmaster and its keeper's whole process
// group at once, as if its machine died, and waits until the keeper has
// exited and the server no longer accepts connections.
func (c *autoFailover) killNode(t testing.TB, name string) {
	t.Helper()
	c.mu.Lock()
	cmd, done := c.procs[name], c.done[name]
	delete(c.procs, name)
	c.mu.Unlock()
	if pid := c.postmaster(name); pid > 0 {
		_ = syscall.Kill(pid, syscall.SIGKILL)
	}
	if cmd != nil {
		_ = syscall.Kill(-cmd.Process.Pid, syscall.SIGKILL)
		<-done
	}
	c.waitFor(t, name+"'s server to be gone", func() (bool, error) {
		conn, err := net.DialTimeout("tcp", fmt.Sprintf("127.0.0.1:%d", c.ports[name]), time.Second)
		if err == nil {
			conn.Close()
		}
		return err != nil, nil
	})
}

// killPostmaster SIGKILLs the node's postmaster alone and waits until its
// keeper has started another one, or the monitor failed over.
func (c *autoFailover) killPostmaster(t testing.TB, name string) {
	t.Helper()
	pid := c.postmaster(name)
	if pid == 0 {
		t.Fatalf("autofailover: %s has no postmaster.pid", name)
	}
	_ = syscall.Kill(pid, syscall.SIGKILL)
	c.waitFor(t, name+"'s server to restart, or another primary", func() (bool, error) {
		var others int
		err := c.mon.QueryRow(`SELECT count(*) FROM pgautofailover.node
WHERE nodename <> $1 AND reportedstate = goalstate AND reportedstate IN ('primary', 'wait_primary')`, name).Scan(&others)
		if err == nil && others > 0 {
			return true, nil
		}
		if p := c.postmaster(name); p == 0 || p == pid {
			return false, nil
		}
		conn, err := net.DialTimeout("tcp", fmt.Sprintf("127.0.0.1:%d", c.ports[name]), time.Second)
		if err != nil {
			return false, nil
		}
		conn.Close()
		return true, nil
	})
}

// postmaster returns the pid in the node's postmaster.pid, or 0.
func (c *autoFailover) postmaster(name string) int {
	b, err := os.ReadFile(filepath.Join(c.pgdata(name), "postmaster.pid"))
	if err != nil {
		return 0
	}
	pid, _ := strconv.Atoi(strings.TrimSpace(strings.SplitN(string(b), "\n", 2)[0]))
	return pid
}

// stopAll kills every process the formation started: keepers with their
// process groups, and the postmasters, whatever state they are in.
func (c *autoFailover) stopAll() {
	if c.mon != nil {
		c.mon.Close()
	}
	c.mu.Lock()
	defer c.mu.Unlock()
	for _, name := range []string{"a", "b", "monitor"} {
		if pid := c.postmaster(name); pid > 0 {
			_ = syscall.Kill(pid, syscall.SIGKILL)
		}
		if cmd := c.procs[name]; cmd != nil {
			_ = syscall.Kill(-cmd.Process.Pid, syscall.SIGKILL)
			<-c.done[name]
		}
	}
}

// run runs a short pg_autoctl command and returns its output.
func (c *autoFailover) run(t testing.TB, args ...string) string {
	t.Helper()
	cmd := c.command(args...)
	out, err := cmd.CombinedOutput()
	if err != nil {
		t.Fatalf("autofailover: pg_autoctl %s: %v\n%s", strings.Join(args, " "), err, out)
	}
	return string(out)
}

// performFailover runs pg_autoctl perform failover, which returns once the
// standby is the primary.
func (c *autoFailover) performFailover(t testing.TB) {
	t.Helper()
	c.run(t, "perform", "failover", "--monitor", c.monitorURI(), "--wait", "120")
}

// asynchronous takes both nodes out of the replication quorum, so that the
// primary's commits no longer wait for the standby, and waits until the
// primary's synchronous_standby_names is empty.
func (c *autoFailover) asynchronous(t testing.TB) {
	t.Helper()
	primary := c.waitStable(t)
	for _, name := range []string{"a", "b"} {
		// pg_autoctl's own update of the node on the monitor can meet the
		// keepers' (a deadlock the monitor reports, seen in CI): setting
		// the same value again is harmless, so it is tried until it holds.
		args := []string{"set", "node", "replication-quorum", "false", "--pgdata", c.pgdata(name)}
		c.waitFor(t, "node "+name+" out of the replication quorum", func() (bool, error) {
			out, err := c.command(args...).CombinedOutput()
			if err != nil {
				return false, fmt.Errorf("pg_autoctl %s: %w\n%s", strings.Join(args, " "), err, out)
			}
			return true, nil
		})
	}
	db, err := sql.Open("pgx", fmt.Sprintf("postgres://postgres@127.0.0.1:%d/postgres?sslmode=disable&connect_timeout=2", c.ports[primary]))
	if err != nil {
		t.Fatal(err)
	}
	defer db.Close()
	c.waitFor(t, "the primary to stop waiting for its standby", func() (bool, error) {
		var names string
		err := db.QueryRow(`SHOW synchronous_standby_names`).Scan(&names)
		return err == nil && names == "", nil
	})
}

// waitStable waits until one node is the primary and the other its
// standby, as both report them to the monitor and the monitor wants them,
// and returns the primary's name.
func (c *autoFailover) waitStable(t testing.TB) string {
	t.Helper()
	var primary string
	c.waitFor(t, "a primary and a secondary", func() (bool, error) {
		rows, err := c.mon.Query(`SELECT nodename, reportedstate, goalstate FROM pgautofailover.node`)
		if err != nil {
			return false, err
		}
		defer rows.Close()
		var p, s int
		for rows.Next() {
			var name, reported, goal string
			if err := rows.Scan(&name, &reported, &goal); err != nil {
				return false, err
			}
			switch {
			case reported == "primary" && goal == "primary":
				p++
				primary = name
			case reported == "secondary" && goal == "secondary":
				s++
			}
		}
		return p == 1 && s == 1, rows.Err()
	})
	return primary
}

// waitPrimary waits until a node other than old is the primary (or, its
// standby gone, wait_primary), as it reports to the monitor and the
// monitor wants it, and returns its name.
func (c *autoFailover) waitPrimary(t testing.TB, old string) string {
	t.Helper()
	var primary string
	c.waitFor(t, "a primary other than "+old, func() (bool, error) {
		err := c.mon.QueryRow(`SELECT nodename FROM pgautofailover.node
WHERE nodename <> $1 AND reportedstate = goalstate AND reportedstate IN ('primary', 'wait_primary')`, old).Scan(&primary)
		return err == nil, nil
	})
	return primary
}

// haWindow is a time in which node, primary, committed without waiting
// for a standby.
type haWindow struct {
	node     string
	from, to time.Time
	then     string // the state it reported at the end
}

func (w haWindow) String() string {
	return fmt.Sprintf("%s did not wait for a standby (wait_primary, %s to %s, then %s)",
		w.node, w.from.Format("15:04:05.000"), w.to.Format("15:04:05.000"), w.then)
}

// unwaited reports whether a was acknowledged in one of the windows of
// l.demotedUnwaited.
func (l *haLedger) unwaited(a haAck) (haWindow, bool) {
	for _, w := range l.demotedUnwaited {
		if !a.acked.Before(w.from) && a.acked.Before(w.to) {
			return w, true
		}
	}
	return haWindow{}, false
}

var (
	goalEvent     = regexp.MustCompile(`node \d+ "([^"]+)" \([^)]*\) to (\w+)`)
	reportedEvent = regexp.MustCompile(`^New state is reported by node \d+ "([^"]+)" \([^)]*\): "(\w+)"`)
)

// demotedUnwaited reads from the monitor's events the times in which a
// primary committed without waiting for its standby and lost its place
// right after: from the monitor's goal of wait_primary for it (its
// keeper empties synchronous_standby_names on the way to it), or its
// report of that state, to its next report of another state, when that
// state is one of a demotion, and a second more for an answer under way.
// Seen here once in a run of three on a loaded machine: the monitor set
// the primary to wait_primary, its standby being slow to answer a health
// check, and 20 ms later to draining for a failover the test asked for;
// the primary's keeper reached wait_primary first and committed alone for
// five seconds, while its standby was being promoted without those
// commits. A window that ends otherwise (the primary again, its standby
// back) lost nothing on the way, and none is tolerated in it.
func (c *autoFailover) demotedUnwaited(t testing.TB) []haWindow {
	t.Helper()
	rows, err := c.mon.Query(`SELECT eventtime, description FROM pgautofailover.event ORDER BY eventtime, eventid`)
	if err != nil {
		t.Fatalf("monitor events: %v", err)
	}
	defer rows.Close()
	open := map[string]time.Time{}
	var out []haWindow
	for rows.Next() {
		var at time.Time
		var what string
		if err := rows.Scan(&at, &what); err != nil {
			t.Fatalf("monitor events: %v", err)
		}
		if strings.HasPrefix(what, "Setting goal state") {
			for _, m := range goalEvent.FindAllStringSubmatch(what, -1) {
				if _, ok := open[m[1]]; !ok && m[2] == "wait_primary" {
					open[m[1]] = at
				}
			}
			continue
		}
		m := reportedEvent.FindStringSubmatch(what)
		if m == nil {
			continue
		}
		node, state := m[1], m[2]
		from, ok := open[node]
		switch {
		case state == "wait_primary" && !ok:
			open[node] = at
		case state != "wait_primary" && ok:
			delete(open, node)
			switch state {
			case "draining", "demote_timeout", "demoted":
				out = append(out, haWindow{node: node, from: from, to: at.Add(time.Second), then: state})
			}
		}
	}
	if err := rows.Err(); err != nil {
		t.Fatalf("monitor events: %v", err)
	}
	return out
}

// events returns the monitor's last n events, oldest first, one line
// each: what pg_auto_failover decided and when, to read beside the
// answers' times.
func (c *autoFailover) events(n int) string {
	if c.mon == nil {
		return ""
	}
	rows, err := c.mon.Query(`SELECT eventtime::text, description FROM
(SELECT * FROM pgautofailover.event ORDER BY eventid DESC LIMIT $1) e ORDER BY eventid`, n)
	if err != nil {
		return fmt.Sprintf("monitor events: %v\n", err)
	}
	defer rows.Close()
	var b strings.Builder
	for rows.Next() {
		var at, what string
		_ = rows.Scan(&at, &what)
		fmt.Fprintf(&b, "monitor event %s: %s\n", at, what)
	}
	return b.String()
}

// waitFor polls ok until it holds, for up to three minutes, then fails the
// test with the formation's state and the end of every log.
func (c *autoFailover) waitFor(t testing.TB, what string, ok func() (bool, error)) {
	t.Helper()
	deadline := time.Now().Add(3 * time.Minute)
	var last error
	for time.Now().Before(deadline) {
		done, err := ok()
		if done && err == nil {
			return
		}
		last = err
		time.Sleep(50 * time.Millisecond)
	}
	var b strings.Builder
	b.WriteString(c.events(30))
	for _, name := range []string{"monitor", "a", "b"} {
		log, _ := os.ReadFile(filepath.Join(c.root, name+".log"))
		if len(log) > 4000 {
			log = log[len(log)-4000:]
		}
		fmt.Fprintf(&b, "--- %s.log (end)\n%s\n", name, log)
	}
	t.Fatalf("autofailover: waited three minutes for %s (last error: %v)\n%s", what, last, b.String())
}
